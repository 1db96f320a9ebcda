// A run's samples (timeline.Sample): the readings of its job kept for each attempt.

package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"
)

// Sample is one reading of a run's memory.
type Sample = timeline.Sample

// AddSample appends a sample for a run.
func (s *Store) AddSample(ctx context.Context, runID string, x *Sample) error {
	var step any
	if x.Step != nil {
		step = *x.Step
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO samples(run_id,attempt,t,rss,nprocs,cgroup_usage,cgroup_limit,gpu_used,cpu_ticks,allocated,reserved,procs,
		pss,limit_bytes,limit_source,gpu_total,inactive_split,alloc_retries,step)
		VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, runID, x.Attempt, ms(x.T), int64(x.RSS), x.NProcs, nullU(x.CgroupUsage),
		nullU(x.CgroupLimit), nullU(x.GPUUsed), int64(x.CPUTicks), nullU(x.Allocated), nullU(x.Reserved), string(x.Procs),
		nullU(x.PSS), int64(x.Limit), x.LimitSource, nullU(x.GPUTotal), nullU(x.InactiveSplit), nullU(x.AllocRetries), step)
	if err != nil {
		return fmt.Errorf("add sample: %w", err)
	}
	return nil
}

const sampleCols = `attempt,t,rss,nprocs,cgroup_usage,cgroup_limit,gpu_used,cpu_ticks,allocated,reserved,procs,
		pss,limit_bytes,limit_source,gpu_total,inactive_split,alloc_retries,step`

// Samples lists a run's samples in time order.
func (s *Store) Samples(ctx context.Context, runID string) ([]*Sample, error) {
	return s.querySamples(ctx, `SELECT `+sampleCols+` FROM samples WHERE run_id=? ORDER BY t, rowid`, runID)
}

// AttemptSamples lists one attempt's samples in time order.
func (s *Store) AttemptSamples(ctx context.Context, runID string, attempt int) ([]*Sample, error) {
	return s.querySamples(ctx, `SELECT `+sampleCols+` FROM samples WHERE run_id=? AND attempt=? ORDER BY t, rowid`, runID, attempt)
}

// LatestSample returns an attempt's newest sample, nil when it has none.
func (s *Store) LatestSample(ctx context.Context, runID string, attempt int) (*Sample, error) {
	xs, err := s.querySamples(ctx, `SELECT `+sampleCols+` FROM samples WHERE run_id=? AND attempt=? ORDER BY t DESC, rowid DESC LIMIT 1`, runID, attempt)
	if err != nil || len(xs) == 0 {
		return nil, err
	}
	return xs[0], nil
}

func (s *Store) querySamples(ctx context.Context, q string, args ...any) ([]*Sample, error) {
	return queryAll(ctx, s.db, "read samples", scanSample, q, args...)
}

func scanSample(sc scanner) (*Sample, error) {
	var x Sample
	var t int64
	var cu, cl, gu, al, re, pss, gt, is, ar, step sql.NullInt64
	var procs string
	var limit int64
	if err := sc.Scan(&x.Attempt, &t, &x.RSS, &x.NProcs, &cu, &cl, &gu, &x.CPUTicks, &al, &re, &procs,
		&pss, &limit, &x.LimitSource, &gt, &is, &ar, &step); err != nil {
		return nil, err
	}
	x.T = time.UnixMilli(t)
	x.CgroupUsage, x.CgroupLimit, x.GPUUsed, x.Allocated, x.Reserved = ptrU(cu), ptrU(cl), ptrU(gu), ptrU(al), ptrU(re)
	x.PSS, x.GPUTotal, x.InactiveSplit, x.AllocRetries = ptrU(pss), ptrU(gt), ptrU(is), ptrU(ar)
	x.Limit = uint64(limit)
	if step.Valid {
		v := step.Int64
		x.Step = &v
	}
	x.Procs = rawJSON(procs)
	return &x, nil
}

func nullU(p *uint64) any {
	if p == nil {
		return nil
	}
	return int64(*p)
}

func ptrU(n sql.NullInt64) *uint64 {
	if !n.Valid {
		return nil
	}
	v := uint64(n.Int64)
	return &v
}
