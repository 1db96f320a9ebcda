// Runs: creating one, its supervisor and end, listing them, and marking lost the runs
// whose supervisor vanished.

package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// Run is one supervised job with all its attempts.
type Run struct {
	ID              string     `json:"id"`
	Name            string     `json:"name"`
	Command         []string   `json:"command"`
	Cwd             string     `json:"cwd"`
	Status          string     `json:"status"` // running, finished, lost
	Reason          string     `json:"reason"`
	ExitCode        *int       `json:"exit_code"`
	StartedAt       time.Time  `json:"started_at"`
	EndedAt         *time.Time `json:"ended_at"`
	Attempts        int        `json:"attempts"`
	SupervisorPID   int        `json:"supervisor_pid"`
	SupervisorStart uint64     `json:"-"`
	JobPID          int        `json:"job_pid"`
	PeakRSS         uint64     `json:"peak_rss_bytes"`
	PeakGPU         uint64     `json:"peak_gpu_bytes"`
	Detached        bool       `json:"detached"`
	Dir             string     `json:"dir"`
	// Group names the distributed job the run is one node's part of (run
	// --group; SLURM_JOB_ID, TORCHELASTIC_RUN_ID), "" for none.
	Group string `json:"group,omitempty"`
	// Postmortem is the JSON post-mortem of the last attempt.
	Postmortem json.RawMessage `json:"-"`
}

// Run statuses.
const (
	StatusRunning  = "running"
	StatusFinished = "finished"
	StatusLost     = "lost"
)

// CreateRun inserts r.
func (s *Store) CreateRun(ctx context.Context, r *Run) error {
	cmd, _ := json.Marshal(r.Command)
	_, err := s.db.ExecContext(ctx, `INSERT INTO runs(id,name,command,cwd,status,started_at,supervisor_pid,supervisor_start,detached,dir,grp)
		VALUES(?,?,?,?,?,?,?,?,?,?,?)`, r.ID, r.Name, string(cmd), r.Cwd, r.Status, ms(r.StartedAt), r.SupervisorPID,
		int64(r.SupervisorStart), boolInt(r.Detached), r.Dir, r.Group)
	if err != nil {
		return fmt.Errorf("create run %s: %w", r.ID, err)
	}
	return nil
}

// CreateRunNamed records a new run under a name no other run has: the check
// and the insert are one statement, so of two runs started at once with the
// same name only one gets it. ok is false (and nothing is recorded) when the
// name is taken; pick another (FreeName) and try again.
func (s *Store) CreateRunNamed(ctx context.Context, r *Run) (ok bool, err error) {
	cmd, _ := json.Marshal(r.Command)
	// the runs of one group (a job's tasks, each its own run) share its name
	res, err := s.db.ExecContext(ctx, `INSERT INTO runs(id,name,command,cwd,status,started_at,supervisor_pid,supervisor_start,detached,dir,grp)
		SELECT ?,?,?,?,?,?,?,?,?,?,? WHERE NOT EXISTS (SELECT 1 FROM runs WHERE name=? AND (?='' OR grp!=?))`, r.ID, r.Name, string(cmd), r.Cwd, r.Status,
		ms(r.StartedAt), r.SupervisorPID, int64(r.SupervisorStart), boolInt(r.Detached), r.Dir, r.Group, r.Name, r.Group, r.Group)
	if err != nil {
		return false, fmt.Errorf("create run %s: %w", r.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("create run %s: %w", r.ID, err)
	}
	return n == 1, nil
}

// UpdateSupervisor records the process that supervises a run (it changes
// when a detached run's daemon takes over).
func (s *Store) UpdateSupervisor(ctx context.Context, id string, pid int, start uint64) error {
	_, err := s.db.ExecContext(ctx, `UPDATE runs SET supervisor_pid=?, supervisor_start=? WHERE id=?`, pid, int64(start), id)
	return err
}

// SetJobPID records the PID of the current attempt's main process.
func (s *Store) SetJobPID(ctx context.Context, id string, pid int) error {
	_, err := s.db.ExecContext(ctx, `UPDATE runs SET job_pid=? WHERE id=?`, pid, id)
	return err
}

// FinishRun records the end of a run.
func (s *Store) FinishRun(ctx context.Context, id, status, reason string, exitCode int, end time.Time, postmortem []byte) error {
	_, err := s.db.ExecContext(ctx, `UPDATE runs SET status=?, reason=?, exit_code=?, ended_at=?, postmortem=? WHERE id=?`,
		status, reason, exitCode, ms(end), string(postmortem), id)
	if err != nil {
		return fmt.Errorf("finish run %s: %w", id, err)
	}
	return nil
}

// UpdatePeaks raises the run's recorded peaks to at least rss and gpu.
func (s *Store) UpdatePeaks(ctx context.Context, id string, rss, gpu uint64) error {
	_, err := s.db.ExecContext(ctx, `UPDATE runs SET peak_rss=max(peak_rss,?), peak_gpu=max(peak_gpu,?) WHERE id=?`, int64(rss), int64(gpu), id)
	return err
}

const runCols = `id,name,command,cwd,status,reason,exit_code,started_at,ended_at,attempts,supervisor_pid,supervisor_start,job_pid,peak_rss,peak_gpu,detached,dir,postmortem,grp`

func scanRun(sc scanner) (*Run, error) {
	var r Run
	var cmd, pm string
	var exit, ended sql.NullInt64
	var started, supStart int64
	var det int
	if err := sc.Scan(&r.ID, &r.Name, &cmd, &r.Cwd, &r.Status, &r.Reason, &exit, &started, &ended, &r.Attempts,
		&r.SupervisorPID, &supStart, &r.JobPID, &r.PeakRSS, &r.PeakGPU, &det, &r.Dir, &pm, &r.Group); err != nil {
		return nil, err
	}
	_ = json.Unmarshal([]byte(cmd), &r.Command)
	r.StartedAt = time.UnixMilli(started)
	r.EndedAt, r.ExitCode = msTime(ended), intOrNil(exit)
	r.SupervisorStart = uint64(supStart)
	r.Detached = det != 0
	r.Postmortem = rawJSON(pm)
	return &r, nil
}

// Runs lists runs, newest first; limit <= 0 means all.
func (s *Store) Runs(ctx context.Context, limit int) ([]*Run, error) {
	q := `SELECT ` + runCols + ` FROM runs ORDER BY started_at DESC, id DESC`
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit)
	}
	return queryAll(ctx, s.db, "list runs", scanRun, q)
}

// MarkLost marks every running run whose supervisor is gone as lost. alive
// reports whether a supervisor (pid, start ticks) still runs.
func (s *Store) MarkLost(ctx context.Context, alive func(pid int, start uint64) bool, now time.Time) ([]string, error) {
	type cand struct {
		id    string
		pid   int
		start int64
	}
	// Every candidate is read, and the rows closed, before the first write.
	cands, err := queryAll(ctx, s.db, "list running runs", func(sc scanner) (cand, error) {
		var c cand
		err := sc.Scan(&c.id, &c.pid, &c.start)
		return c, err
	}, `SELECT id, supervisor_pid, supervisor_start FROM runs WHERE status=?`, StatusRunning)
	if err != nil {
		return nil, err
	}
	var lost []string
	for _, c := range cands {
		if alive(c.pid, uint64(c.start)) {
			continue
		}
		pm, _ := json.Marshal(map[string]any{
			"reason": "lost", "summary": "the supervisor of this run vanished before the run ended",
			"evidence": []string{fmt.Sprintf("supervisor pid %d no longer runs", c.pid)},
			"advice":   []string{"vramguard itself was killed (or the machine rebooted); the job's processes were ended with it. Check the log with `vramguard logs " + c.id + "`."},
		})
		res, err := s.db.ExecContext(ctx, `UPDATE runs SET status=?, reason='lost', ended_at=?, postmortem=? WHERE id=? AND status=?`,
			StatusLost, ms(now), string(pm), c.id, StatusRunning)
		if err != nil {
			return lost, err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			s.db.ExecContext(ctx, `UPDATE attempts SET reason='lost', ended_at=? WHERE run_id=? AND ended_at IS NULL`, ms(now), c.id)
			lost = append(lost, c.id)
		}
	}
	return lost, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ReopenRun marks a finished run as running again under a new supervisor,
// for a run that continues with more attempts (a restarted Jupyter kernel).
func (s *Store) ReopenRun(ctx context.Context, id string, pid int, start uint64) error {
	_, err := s.db.ExecContext(ctx, `UPDATE runs SET status=?, supervisor_pid=?, supervisor_start=?, ended_at=NULL WHERE id=?`,
		StatusRunning, pid, int64(start), id)
	if err != nil {
		return fmt.Errorf("reopen run %s: %w", id, err)
	}
	return nil
}
