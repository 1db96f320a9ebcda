// Package store keeps runs, attempts, events and samples in one SQLite
// database (modernc.org/sqlite, pure Go) under the state directory. Writes
// are small transactions in WAL mode, so a crash of vramguard loses at most
// the sample being written; a run whose supervisor vanished is marked lost
// by MarkLost. The store never interprets what it keeps.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

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

func ms(t time.Time) int64 { return t.UnixMilli() }
