// Finding a run by what a user types (id, id prefix, name, "last") and the names runs
// are given.

package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

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
		found, qerr := queryAll(ctx, s.db, "find run "+ref, scanRun, `SELECT `+runCols+` FROM runs WHERE id LIKE ? ESCAPE '\' LIMIT 2`, escapeLike(ref)+"%")
		if qerr != nil {
			return nil, qerr
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
	return queryOne(ctx, s.db, scanRun, `SELECT `+runCols+` FROM runs WHERE name=? AND (?='' OR grp!=?) ORDER BY started_at DESC, id DESC LIMIT 1`, name, group, group)
}

// FreeName returns name when no run has it, else the first of name-2,
// name-3, ... that no run has; with a group, a name only its runs have is
// free (the runs of one group share its name).
func (s *Store) FreeName(ctx context.Context, name, group string) (string, error) {
	names, err := queryAll(ctx, s.db, "look up run names", scanString,
		`SELECT name FROM runs WHERE (name=? OR name LIKE ? ESCAPE '\') AND (?='' OR grp!=?)`, name, escapeLike(name)+"-%", group, group)
	if err != nil {
		return "", err
	}
	taken := map[string]bool{}
	for _, n := range names {
		taken[n] = true
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

func escapeLike(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(s)
}
