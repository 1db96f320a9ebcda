package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// agentSchema holds the machine-wide timelines of `vramguard serve`: every
// job the agent saw, its memory timeline in opaque blocks (the agent encodes
// and decodes them; the store only keeps and prunes them) at one or more
// resolutions, and its events. Blocks are keyed by (job, resolution, start)
// without a rowid, so a day of 1 Hz samples for a job is a few thousand
// small rows rather than 86,400.
const agentSchema = `CREATE TABLE agent_jobs (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		key TEXT NOT NULL UNIQUE,
		kind TEXT NOT NULL DEFAULT '',
		name TEXT NOT NULL DEFAULT '',
		info TEXT NOT NULL DEFAULT '',
		first_seen INTEGER NOT NULL,
		last_seen INTEGER NOT NULL,
		ended_at INTEGER
	);
	CREATE INDEX agent_jobs_last ON agent_jobs(last_seen);
	CREATE TABLE agent_blocks (
		job INTEGER NOT NULL,
		res INTEGER NOT NULL,
		t0 INTEGER NOT NULL,
		t1 INTEGER NOT NULL,
		n INTEGER NOT NULL,
		data BLOB NOT NULL,
		PRIMARY KEY (job, res, t0)
	) WITHOUT ROWID;
	CREATE INDEX agent_blocks_age ON agent_blocks(res, t1);
	CREATE TABLE agent_events (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		job_key TEXT NOT NULL DEFAULT '',
		job_name TEXT NOT NULL DEFAULT '',
		t INTEGER NOT NULL,
		kind TEXT NOT NULL,
		message TEXT NOT NULL DEFAULT '',
		data TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX agent_events_job ON agent_events(job_key, t);
	CREATE INDEX agent_events_t ON agent_events(t);`

// AgentJob is a job the agent has seen on the machine.
type AgentJob struct {
	ID   int64  `json:"-"`
	Key  string `json:"key"`
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Info is the agent's JSON description of the job (labels, devices,
	// limit); the store does not read it.
	Info      json.RawMessage `json:"info,omitempty"`
	FirstSeen time.Time       `json:"first_seen"`
	LastSeen  time.Time       `json:"last_seen"`
	EndedAt   *time.Time      `json:"ended_at,omitempty"`
}

// UpsertAgentJob records j (by Key), returning its id; an existing job's
// name, info and last-seen time are updated and its end is cleared.
func (s *Store) UpsertAgentJob(ctx context.Context, j *AgentJob) (int64, error) {
	var id int64
	err := s.db.QueryRowContext(ctx, `INSERT INTO agent_jobs(key,kind,name,info,first_seen,last_seen) VALUES(?,?,?,?,?,?)
		ON CONFLICT(key) DO UPDATE SET name=excluded.name, info=excluded.info, last_seen=excluded.last_seen, ended_at=NULL
		RETURNING id`, j.Key, j.Kind, j.Name, string(j.Info), ms(j.FirstSeen), ms(j.LastSeen)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record job %s: %w", j.Key, err)
	}
	j.ID = id
	return id, nil
}

// TouchAgentJobs sets the last-seen time of the jobs with ids.
func (s *Store) TouchAgentJobs(ctx context.Context, ids []int64, t time.Time) error {
	return execEach(ctx, s.db, `UPDATE agent_jobs SET last_seen=? WHERE id=?`, ids,
		func(id int64) []any { return []any{ms(t), id} },
		func(id int64, err error) error { return fmt.Errorf("touch job %d: %w", id, err) })
}

// EndAgentJob records that the job with id is gone.
func (s *Store) EndAgentJob(ctx context.Context, id int64, t time.Time) error {
	_, err := s.db.ExecContext(ctx, `UPDATE agent_jobs SET ended_at=?, last_seen=max(last_seen,?) WHERE id=?`, ms(t), ms(t), id)
	return err
}

// AgentJobs lists jobs last seen at or after since, most recent first.
func (s *Store) AgentJobs(ctx context.Context, since time.Time) ([]*AgentJob, error) {
	return queryAll(ctx, s.db, "list jobs", func(sc scanner) (*AgentJob, error) {
		var j AgentJob
		var info string
		var first, last int64
		var ended sql.NullInt64
		if err := sc.Scan(&j.ID, &j.Key, &j.Kind, &j.Name, &info, &first, &last, &ended); err != nil {
			return nil, err
		}
		j.Info = rawJSON(info)
		j.FirstSeen, j.LastSeen, j.EndedAt = time.UnixMilli(first), time.UnixMilli(last), msTime(ended)
		return &j, nil
	}, `SELECT id,key,kind,name,info,first_seen,last_seen,ended_at FROM agent_jobs
		WHERE last_seen>=? ORDER BY last_seen DESC, id`, ms(since))
}

// AgentBlock is one stretch of a job's timeline at one resolution.
type AgentBlock struct {
	Job  int64
	Res  int
	T0   time.Time
	T1   time.Time
	N    int
	Data []byte
}

// AddAgentBlocks stores blocks in one transaction; a block with the same
// (job, res, t0) replaces the earlier one.
func (s *Store) AddAgentBlocks(ctx context.Context, blocks []AgentBlock) error {
	return execEach(ctx, s.db, `INSERT OR REPLACE INTO agent_blocks(job,res,t0,t1,n,data) VALUES(?,?,?,?,?,?)`, blocks,
		func(b AgentBlock) []any { return []any{b.Job, b.Res, ms(b.T0), ms(b.T1), b.N, b.Data} },
		func(_ AgentBlock, err error) error { return fmt.Errorf("add timeline block: %w", err) })
}

// AgentBlocks returns the job's blocks at resolution res that overlap
// [from, to], oldest first.
func (s *Store) AgentBlocks(ctx context.Context, job int64, res int, from, to time.Time) ([]AgentBlock, error) {
	return queryAll(ctx, s.db, "read timeline", func(sc scanner) (AgentBlock, error) {
		b := AgentBlock{Job: job, Res: res}
		var t0, t1 int64
		err := sc.Scan(&t0, &t1, &b.N, &b.Data)
		b.T0, b.T1 = time.UnixMilli(t0), time.UnixMilli(t1)
		return b, err
	}, `SELECT t0,t1,n,data FROM agent_blocks WHERE job=? AND res=? AND t0<=? AND t1>=? ORDER BY t0`,
		job, res, ms(to), ms(from))
}

// PruneAgentBlocks deletes blocks at resolution res that ended before
// before, and returns how many.
func (s *Store) PruneAgentBlocks(ctx context.Context, res int, before time.Time) (int64, error) {
	r, err := s.db.ExecContext(ctx, `DELETE FROM agent_blocks WHERE res=? AND t1<?`, res, ms(before))
	if err != nil {
		return 0, fmt.Errorf("prune timelines: %w", err)
	}
	return r.RowsAffected()
}

// AgentBlockBytes is the payload size of the stored blocks at res.
func (s *Store) AgentBlockBytes(ctx context.Context, res int) (int64, error) {
	var n sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT sum(length(data)) FROM agent_blocks WHERE res=?`, res).Scan(&n)
	return n.Int64, err
}

// OldestAgentBlock is the end time of the oldest block at res (false when
// there is none).
func (s *Store) OldestAgentBlock(ctx context.Context, res int) (time.Time, bool, error) {
	var t sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT min(t1) FROM agent_blocks WHERE res=?`, res).Scan(&t); err != nil {
		return time.Time{}, false, err
	}
	return time.UnixMilli(t.Int64), t.Valid, nil
}

// PruneAgentJobs deletes ended jobs last seen before before that have no
// blocks left, with their events.
func (s *Store) PruneAgentJobs(ctx context.Context, before time.Time) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM agent_events WHERE t<?`, ms(before))
	if err != nil {
		return fmt.Errorf("prune events: %w", err)
	}
	_, err = s.db.ExecContext(ctx, `DELETE FROM agent_jobs WHERE last_seen<? AND ended_at IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM agent_blocks b WHERE b.job=agent_jobs.id)`, ms(before))
	if err != nil {
		return fmt.Errorf("prune jobs: %w", err)
	}
	return nil
}

// AgentEvent is something that happened to a job the agent watches.
type AgentEvent struct {
	ID      int64           `json:"id"`
	JobKey  string          `json:"job_key,omitempty"`
	JobName string          `json:"job_name,omitempty"`
	T       time.Time       `json:"t"`
	Kind    string          `json:"kind"`
	Message string          `json:"message,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// AddAgentEvent appends e and sets its ID.
func (s *Store) AddAgentEvent(ctx context.Context, e *AgentEvent) error {
	r, err := s.db.ExecContext(ctx, `INSERT INTO agent_events(job_key,job_name,t,kind,message,data) VALUES(?,?,?,?,?,?)`,
		e.JobKey, e.JobName, ms(e.T), e.Kind, e.Message, string(e.Data))
	if err != nil {
		return fmt.Errorf("add event: %w", err)
	}
	e.ID, err = r.LastInsertId()
	return err
}

// AgentEventFilter selects events: after an id, from a time, for one job.
type AgentEventFilter struct {
	AfterID int64
	Since   time.Time
	JobKey  string
	Limit   int
}

// AgentEvents lists events matching f in id order (the newest Limit when
// Limit > 0).
func (s *Store) AgentEvents(ctx context.Context, f AgentEventFilter) ([]*AgentEvent, error) {
	q := `SELECT id,job_key,job_name,t,kind,message,data FROM agent_events WHERE id>? AND t>=?`
	args := []any{f.AfterID, ms(f.Since)}
	if f.JobKey != "" {
		q += ` AND job_key=?`
		args = append(args, f.JobKey)
	}
	q += ` ORDER BY id DESC`
	if f.Limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, f.Limit)
	}
	out, err := queryAll(ctx, s.db, "list events", func(sc scanner) (*AgentEvent, error) {
		var e AgentEvent
		var t int64
		var data string
		if err := sc.Scan(&e.ID, &e.JobKey, &e.JobName, &t, &e.Kind, &e.Message, &data); err != nil {
			return nil, err
		}
		e.T, e.Data = time.UnixMilli(t), rawJSON(data)
		return &e, nil
	}, q, args...)
	if err != nil {
		return nil, err
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}
