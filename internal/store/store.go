// Package store keeps runs, attempts, events and samples in one SQLite
// database (modernc.org/sqlite, pure Go) under the state directory. Writes
// are small transactions in WAL mode, so a crash of vramguard loses at most
// the sample being written; a run whose supervisor vanished is marked lost
// by MarkLost. The store never interprets what it keeps.
package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"

	_ "modernc.org/sqlite"
)

// ErrNotFound is returned when a run does not exist.
var ErrNotFound = errors.New("no such run")

// Store is an open database. It is safe for concurrent use.
type Store struct {
	db   *sql.DB
	path string
}

// migrations are applied in order; the index+1 is the schema version. Never
// edit one that has shipped: append a new one.
var migrations = []string{
	`CREATE TABLE runs (
		id TEXT PRIMARY KEY,
		name TEXT NOT NULL DEFAULT '',
		command TEXT NOT NULL,
		cwd TEXT NOT NULL DEFAULT '',
		status TEXT NOT NULL,
		reason TEXT NOT NULL DEFAULT '',
		exit_code INTEGER,
		started_at INTEGER NOT NULL,
		ended_at INTEGER,
		attempts INTEGER NOT NULL DEFAULT 0,
		supervisor_pid INTEGER NOT NULL DEFAULT 0,
		supervisor_start INTEGER NOT NULL DEFAULT 0,
		job_pid INTEGER NOT NULL DEFAULT 0,
		peak_rss INTEGER NOT NULL DEFAULT 0,
		peak_gpu INTEGER NOT NULL DEFAULT 0,
		detached INTEGER NOT NULL DEFAULT 0,
		dir TEXT NOT NULL DEFAULT '',
		postmortem TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX runs_name ON runs(name);
	CREATE INDEX runs_started ON runs(started_at);
	CREATE TABLE attempts (
		run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
		n INTEGER NOT NULL,
		started_at INTEGER NOT NULL,
		ended_at INTEGER,
		pid INTEGER NOT NULL DEFAULT 0,
		exit_code INTEGER,
		reason TEXT NOT NULL DEFAULT '',
		log_path TEXT NOT NULL DEFAULT '',
		resume_from TEXT NOT NULL DEFAULT '',
		verdict TEXT NOT NULL DEFAULT '',
		PRIMARY KEY (run_id, n)
	);
	CREATE TABLE events (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
		attempt INTEGER NOT NULL DEFAULT 0,
		t INTEGER NOT NULL,
		kind TEXT NOT NULL,
		message TEXT NOT NULL DEFAULT '',
		data TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX events_run ON events(run_id, t);
	CREATE TABLE samples (
		run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
		attempt INTEGER NOT NULL,
		t INTEGER NOT NULL,
		rss INTEGER NOT NULL,
		nprocs INTEGER NOT NULL,
		cgroup_usage INTEGER,
		cgroup_limit INTEGER,
		gpu_used INTEGER,
		cpu_ticks INTEGER NOT NULL DEFAULT 0,
		allocated INTEGER,
		reserved INTEGER,
		procs TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX samples_run ON samples(run_id, t);`,
	agentSchema,
	kernelsSchema,
	// the one timeline: every figure of timeline.Sample has its column
	`ALTER TABLE samples ADD COLUMN pss INTEGER;
	ALTER TABLE samples ADD COLUMN limit_bytes INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE samples ADD COLUMN limit_source TEXT NOT NULL DEFAULT '';
	ALTER TABLE samples ADD COLUMN gpu_total INTEGER;
	ALTER TABLE samples ADD COLUMN inactive_split INTEGER;
	ALTER TABLE samples ADD COLUMN alloc_retries INTEGER;
	ALTER TABLE samples ADD COLUMN step INTEGER;`,
	// a distributed job's identity across nodes (run --group)
	`ALTER TABLE runs ADD COLUMN grp TEXT NOT NULL DEFAULT '';`,
}

// Open opens (creating if needed) the database in dir and migrates it.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory %s: %w", dir, err)
	}
	return open(dir)
}

// OpenExisting opens the database in dir for a command that only reads: it
// creates nothing, and answers ErrNoStore when dir holds no database yet.
func OpenExisting(dir string) (*Store, error) {
	if _, err := os.Stat(filepath.Join(dir, "vramguard.db")); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoStore)
	}
	return open(dir)
}

// ErrNoStore is returned by OpenExisting for a state directory without a
// database (no run was ever recorded there).
var ErrNoStore = errors.New("no runs yet")

// ErrCorrupt is returned by Open for a database file that is not an SQLite
// database or is damaged; CorruptError says which file.
var ErrCorrupt = errors.New("not a valid vramguard database")

// CorruptError is a database file Open cannot use.
type CorruptError struct {
	Path string
	Err  error // what SQLite said
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s is %v (%v)", e.Path, ErrCorrupt, e.Err)
}

func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// busy reports whether err is SQLite's "database is locked" (SQLITE_BUSY).
func busy(err error) bool {
	s := err.Error()
	return strings.Contains(s, "SQLITE_BUSY") || strings.Contains(s, "database is locked")
}

// corrupt reports whether err is SQLite's answer to a damaged file or one
// that is not a database at all (SQLITE_CORRUPT, SQLITE_NOTADB).
func corrupt(err error) bool {
	s := err.Error()
	return strings.Contains(s, "file is not a database") || strings.Contains(s, "database disk image is malformed") ||
		strings.Contains(s, "SQLITE_NOTADB") || strings.Contains(s, "SQLITE_CORRUPT")
}

func open(dir string) (*Store, error) {
	path := filepath.Join(dir, "vramguard.db")
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := &Store{db: db, path: path}
	// A connection's first statement sets journal_mode(WAL), which SQLite
	// answers with SQLITE_BUSY at once, past busy_timeout, while another
	// process creates or migrates the same new database: try again for as
	// long as busy_timeout would wait.
	err = s.migrate()
	for deadline := time.Now().Add(10 * time.Second); err != nil && busy(err) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		err = s.migrate()
	}
	if err != nil {
		db.Close()
		if corrupt(err) {
			return nil, &CorruptError{Path: path, Err: err}
		}
		return nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	return s, nil
}

// CanWrite reports whether a write could begin now: it takes the write
// lock (BEGIN IMMEDIATE), waiting at most wait for another process that
// holds it, and gives it back. A read-only file or directory and a lock
// held longer than wait answer an error, so a caller that must not wait
// (run, before it starts the job) learns it at once.
func (s *Store) CanWrite(ctx context.Context, wait time.Duration) error {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, wait.Milliseconds())); err != nil {
		return err
	}
	// the connection goes back to the pool: give it the usual wait again
	defer c.ExecContext(context.WithoutCancel(ctx), `PRAGMA busy_timeout = 10000`)
	if _, err := c.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		if strings.Contains(err.Error(), "locked") || strings.Contains(err.Error(), "busy") {
			return fmt.Errorf("%s is locked by another process (it holds a write transaction)", s.path)
		}
		return fmt.Errorf("%s cannot be written: %w", s.path, err)
	}
	_, err = c.ExecContext(ctx, `ROLLBACK`)
	return err
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

func (s *Store) migrate() error {
	ctx := context.Background()
	var v int
	if err := s.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	if v >= len(migrations) {
		return nil
	}
	// BEGIN IMMEDIATE takes the write lock first, waiting (busy_timeout) for
	// another process that migrates the same new database: a deferred
	// transaction that read the version and then wrote would fail at once
	// (SQLITE_BUSY) when the other one committed in between. The version is
	// read again under the lock.
	c, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return fmt.Errorf("take the write lock: %w", err)
	}
	done := false
	defer func() {
		if !done {
			c.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		}
	}()
	if err := c.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	for i := v; i < len(migrations); i++ {
		if _, err := c.ExecContext(ctx, migrations[i]); err != nil {
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
	}
	if _, err := c.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, len(migrations))); err != nil {
		return err
	}
	if _, err := c.ExecContext(ctx, `COMMIT`); err != nil {
		return err
	}
	done = true
	return nil
}

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

func ms(t time.Time) int64 { return t.UnixMilli() }

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

func scanRun(sc interface{ Scan(...any) error }) (*Run, error) {
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
	if ended.Valid {
		t := time.UnixMilli(ended.Int64)
		r.EndedAt = &t
	}
	if exit.Valid {
		e := int(exit.Int64)
		r.ExitCode = &e
	}
	r.SupervisorStart = uint64(supStart)
	r.Detached = det != 0
	if pm != "" {
		r.Postmortem = json.RawMessage(pm)
	}
	return &r, nil
}

// Runs lists runs, newest first; limit <= 0 means all.
func (s *Store) Runs(ctx context.Context, limit int) ([]*Run, error) {
	q := `SELECT ` + runCols + ` FROM runs ORDER BY started_at DESC, id DESC`
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit)
	}
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	defer rows.Close()
	var out []*Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Resolve finds a run by id, id prefix, name (the newest with that name) or
// "last".
func (s *Store) Resolve(ctx context.Context, ref string) (*Run, error) {
	var row *sql.Row
	switch {
	case ref == "last" || ref == "":
		row = s.db.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs ORDER BY started_at DESC, id DESC LIMIT 1`)
	default:
		row = s.db.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE id=? OR name=? ORDER BY (id=?) DESC, started_at DESC LIMIT 1`, ref, ref, ref)
	}
	r, err := scanRun(row)
	if errors.Is(err, sql.ErrNoRows) && ref != "last" && ref != "" {
		// An unambiguous id prefix.
		rows, qerr := s.db.QueryContext(ctx, `SELECT `+runCols+` FROM runs WHERE id LIKE ? ESCAPE '\' LIMIT 2`, escapeLike(ref)+"%")
		if qerr != nil {
			return nil, qerr
		}
		defer rows.Close()
		var found []*Run
		for rows.Next() {
			rr, err := scanRun(rows)
			if err != nil {
				return nil, err
			}
			found = append(found, rr)
		}
		switch {
		case len(found) == 1:
			return found[0], nil
		case len(found) > 1:
			return nil, s.ambiguous(ctx, ref)
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q (see `vramguard runs`)", ErrNotFound, ref)
	}
	return r, err
}

// maxCandidates is how many runs an AmbiguousError lists.
const maxCandidates = 5

// AmbiguousError is a RUN that is a prefix of more than one run id.
type AmbiguousError struct {
	Ref string
	// Candidates are the newest runs whose id starts with Ref, at most
	// maxCandidates of them; Total counts them all.
	Candidates []*Run
	Total      int
}

func (e *AmbiguousError) Error() string {
	ids := make([]string, 0, len(e.Candidates))
	for _, r := range e.Candidates {
		id := r.ID
		if r.Name != "" {
			id += " (" + r.Name + ")"
		}
		ids = append(ids, id)
	}
	more := ""
	if e.Total > len(e.Candidates) {
		more = fmt.Sprintf(" and %d more", e.Total-len(e.Candidates))
	}
	return fmt.Sprintf("run %q is ambiguous: it matches %d runs: %s%s; give more of the id", e.Ref, e.Total, strings.Join(ids, ", "), more)
}

func (s *Store) ambiguous(ctx context.Context, ref string) error {
	pat := escapeLike(ref) + "%"
	e := &AmbiguousError{Ref: ref}
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM runs WHERE id LIKE ? ESCAPE '\'`, pat).Scan(&e.Total); err != nil {
		return err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+runCols+` FROM runs WHERE id LIKE ? ESCAPE '\' ORDER BY started_at DESC, id DESC LIMIT ?`, pat, maxCandidates)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return err
		}
		e.Candidates = append(e.Candidates, r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return e
}

// SetRunName renames run id (a kernel's run takes its notebook's name once
// the notebook is known).
func (s *Store) SetRunName(ctx context.Context, id, name string) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE runs SET name=? WHERE id=?`, name, id); err != nil {
		return fmt.Errorf("rename run %s: %w", id, err)
	}
	return nil
}

// NameOwner returns the newest run named name, or ErrNotFound; with a
// group, the newest of another group (or none): the runs of one group
// share its name.
func (s *Store) NameOwner(ctx context.Context, name, group string) (*Run, error) {
	r, err := scanRun(s.db.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE name=? AND (?='' OR grp!=?) ORDER BY started_at DESC, id DESC LIMIT 1`, name, group, group))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	return r, err
}

// FreeName returns name when no run has it, else the first of name-2,
// name-3, ... that no run has; with a group, a name only its runs have is
// free (the runs of one group share its name).
func (s *Store) FreeName(ctx context.Context, name, group string) (string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name FROM runs WHERE (name=? OR name LIKE ? ESCAPE '\') AND (?='' OR grp!=?)`, name, escapeLike(name)+"-%", group, group)
	if err != nil {
		return "", fmt.Errorf("look up run names: %w", err)
	}
	defer rows.Close()
	taken := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return "", err
		}
		taken[n] = true
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	if !taken[name] {
		return name, nil
	}
	for i := 2; ; i++ {
		if n := fmt.Sprintf("%s-%d", name, i); !taken[n] {
			return n, nil
		}
	}
}

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
	rows, err := s.db.QueryContext(ctx, `SELECT run_id, reason FROM attempts WHERE run_id IN (?`+strings.Repeat(`,?`, len(ids)-1)+`) ORDER BY run_id, n`, args...)
	if err != nil {
		return nil, fmt.Errorf("read attempts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, reason string
		if err := rows.Scan(&id, &reason); err != nil {
			return nil, err
		}
		out[id] = append(out[id], reason)
	}
	return out, rows.Err()
}

func escapeLike(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(s)
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
	rows, err := s.db.QueryContext(ctx, `SELECT n,started_at,ended_at,pid,exit_code,reason,log_path,resume_from,verdict FROM attempts WHERE run_id=? ORDER BY n`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Attempt
	for rows.Next() {
		a := Attempt{RunID: runID}
		var started int64
		var ended, exit sql.NullInt64
		var verdict string
		if err := rows.Scan(&a.N, &started, &ended, &a.PID, &exit, &a.Reason, &a.LogPath, &a.ResumeFrom, &verdict); err != nil {
			return nil, err
		}
		a.StartedAt = time.UnixMilli(started)
		if ended.Valid {
			t := time.UnixMilli(ended.Int64)
			a.EndedAt = &t
		}
		if exit.Valid {
			e := int(exit.Int64)
			a.ExitCode = &e
		}
		if verdict != "" {
			a.Verdict = json.RawMessage(verdict)
		}
		out = append(out, &a)
	}
	return out, rows.Err()
}

// Event is something that happened to a run at a moment.
type Event = timeline.Event

// AddEvent appends e.
func (s *Store) AddEvent(ctx context.Context, e *Event) error {
	data := string(e.Data)
	res, err := s.db.ExecContext(ctx, `INSERT INTO events(run_id,attempt,t,kind,message,data) VALUES(?,?,?,?,?,?)`,
		e.RunID, e.Attempt, ms(e.T), e.Kind, e.Message, data)
	if err != nil {
		return fmt.Errorf("add event: %w", err)
	}
	e.ID, _ = res.LastInsertId()
	return nil
}

// Events lists a run's events in time order.
func (s *Store) Events(ctx context.Context, runID string) ([]*Event, error) {
	return s.queryEvents(ctx, runID, `SELECT id,attempt,t,kind,message,data FROM events WHERE run_id=? ORDER BY t, id`, runID)
}

func (s *Store) queryEvents(ctx context.Context, runID, q string, args ...any) ([]*Event, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	var out []*Event
	for rows.Next() {
		e := Event{RunID: runID}
		var t int64
		var data string
		if err := rows.Scan(&e.ID, &e.Attempt, &t, &e.Kind, &e.Message, &data); err != nil {
			return nil, err
		}
		e.T = time.UnixMilli(t)
		if data != "" {
			e.Data = json.RawMessage(data)
		}
		out = append(out, &e)
	}
	return out, rows.Err()
}

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
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read samples: %w", err)
	}
	defer rows.Close()
	var out []*Sample
	for rows.Next() {
		var x Sample
		var t int64
		var cu, cl, gu, al, re, pss, gt, is, ar, step sql.NullInt64
		var procs string
		var limit int64
		if err := rows.Scan(&x.Attempt, &t, &x.RSS, &x.NProcs, &cu, &cl, &gu, &x.CPUTicks, &al, &re, &procs,
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
		if procs != "" {
			x.Procs = json.RawMessage(procs)
		}
		out = append(out, &x)
	}
	return out, rows.Err()
}

// AttemptEvents lists one attempt's events of the given kinds (all kinds
// when none is given) in time order.
func (s *Store) AttemptEvents(ctx context.Context, runID string, attempt int, kinds ...string) ([]*Event, error) {
	q := `SELECT id,attempt,t,kind,message,data FROM events WHERE run_id=? AND attempt=?`
	args := []any{runID, attempt}
	if len(kinds) > 0 {
		q += ` AND kind IN (?` + strings.Repeat(`,?`, len(kinds)-1) + `)`
		for _, k := range kinds {
			args = append(args, k)
		}
	}
	return s.queryEvents(ctx, runID, q+` ORDER BY t, id`, args...)
}

// MarkLost marks every running run whose supervisor is gone as lost. alive
// reports whether a supervisor (pid, start ticks) still runs.
func (s *Store) MarkLost(ctx context.Context, alive func(pid int, start uint64) bool, now time.Time) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, supervisor_pid, supervisor_start FROM runs WHERE status=?`, StatusRunning)
	if err != nil {
		return nil, err
	}
	type cand struct {
		id    string
		pid   int
		start int64
	}
	var cands []cand
	for rows.Next() {
		var c cand
		if err := rows.Scan(&c.id, &c.pid, &c.start); err != nil {
			rows.Close()
			return nil, err
		}
		cands = append(cands, c)
	}
	rows.Close()
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
