// A run's attempts: each start of its command, and how each ended.

package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// AttemptReasons returns, for each of the runs ids, the reasons its
// attempts ended with, in attempt order ("" for one still running).
func (s *Store) AttemptReasons(ctx context.Context, ids []string) (map[string][]string, error) {
	out := make(map[string][]string, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := queryAll(ctx, s.db, "read attempts", func(sc scanner) (r [2]string, err error) {
		err = sc.Scan(&r[0], &r[1])
		return r, err
	}, `SELECT run_id, reason FROM attempts WHERE run_id IN (?`+strings.Repeat(`,?`, len(ids)-1)+`) ORDER BY run_id, n`, args...)
	if err != nil {
		return nil, err
	}
	for _, r := range rows { // run id, reason
		out[r[0]] = append(out[r[0]], r[1])
	}
	return out, nil
}

// Attempt is one start of a run's command.
type Attempt struct {
	RunID      string          `json:"-"`
	N          int             `json:"n"`
	StartedAt  time.Time       `json:"started_at"`
	EndedAt    *time.Time      `json:"ended_at"`
	PID        int             `json:"pid"`
	ExitCode   *int            `json:"exit_code"`
	Reason     string          `json:"reason"`
	LogPath    string          `json:"log_path"`
	ResumeFrom string          `json:"resume_from"`
	Verdict    json.RawMessage `json:"verdict,omitempty"`
}

// StartAttempt records attempt a and bumps the run's attempt count.
func (s *Store) StartAttempt(ctx context.Context, a *Attempt) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO attempts(run_id,n,started_at,pid,log_path,resume_from) VALUES(?,?,?,?,?,?)`,
		a.RunID, a.N, ms(a.StartedAt), a.PID, a.LogPath, a.ResumeFrom); err != nil {
		return fmt.Errorf("start attempt %d of %s: %w", a.N, a.RunID, err)
	}
	if _, err := tx.Exec(`UPDATE runs SET attempts=? WHERE id=?`, a.N, a.RunID); err != nil {
		return err
	}
	return tx.Commit()
}

// SetAttemptPID records the PID of an attempt once it started.
func (s *Store) SetAttemptPID(ctx context.Context, runID string, n, pid int) error {
	_, err := s.db.ExecContext(ctx, `UPDATE attempts SET pid=? WHERE run_id=? AND n=?`, pid, runID, n)
	return err
}

// FinishAttempt records how an attempt ended.
func (s *Store) FinishAttempt(ctx context.Context, runID string, n int, end time.Time, exitCode int, reason string, verdict []byte) error {
	_, err := s.db.ExecContext(ctx, `UPDATE attempts SET ended_at=?, exit_code=?, reason=?, verdict=? WHERE run_id=? AND n=?`,
		ms(end), exitCode, reason, string(verdict), runID, n)
	return err
}

// Attempts lists a run's attempts in order.
func (s *Store) Attempts(ctx context.Context, runID string) ([]*Attempt, error) {
	return queryAll(ctx, s.db, "read attempts", func(sc scanner) (*Attempt, error) {
		a := Attempt{RunID: runID}
		var started int64
		var ended, exit sql.NullInt64
		var verdict string
		if err := sc.Scan(&a.N, &started, &ended, &a.PID, &exit, &a.Reason, &a.LogPath, &a.ResumeFrom, &verdict); err != nil {
			return nil, err
		}
		a.StartedAt, a.EndedAt, a.ExitCode = time.UnixMilli(started), msTime(ended), intOrNil(exit)
		a.Verdict = rawJSON(verdict)
		return &a, nil
	}, `SELECT n,started_at,ended_at,pid,exit_code,reason,log_path,resume_from,verdict FROM attempts WHERE run_id=? ORDER BY n`, runID)
}
