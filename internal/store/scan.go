// The shapes every table's reader and batch writer share.

package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// scanner is what *sql.Row and *sql.Rows have in common: a row's columns
// read into pointers.
type scanner interface{ Scan(...any) error }

// queryAll runs q and returns every row scan reads, in the order the query
// gives them. A failing query is returned as "what: error"; a failing scan
// or iteration as it is.
func queryAll[T any](ctx context.Context, db *sql.DB, what string, scan func(scanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		x, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

// queryOne runs q and returns the first row scan reads, or ErrNotFound when
// there is none.
func queryOne[T any](ctx context.Context, db *sql.DB, scan func(scanner) (T, error), q string, args ...any) (T, error) {
	x, err := scan(db.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return x, ErrNotFound
	}
	return x, err
}

// execEach runs q once for each item, with the arguments args gives it, in
// one transaction: all are written or none. fail turns an item's error
// into the one returned. No items is no transaction.
func execEach[T any](ctx context.Context, db *sql.DB, q string, items []T, args func(T) []any, fail func(T, error) error) error {
	if len(items) == 0 {
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	st, err := tx.PrepareContext(ctx, q)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, x := range items {
		if _, err := st.ExecContext(ctx, args(x)...); err != nil {
			return fail(x, err)
		}
	}
	return tx.Commit()
}

// msTime is a nullable millisecond column as a time, nil for NULL.
func msTime(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := time.UnixMilli(n.Int64)
	return &t
}

// intOrNil is a nullable integer column as an int, nil for NULL.
func intOrNil(n sql.NullInt64) *int {
	if !n.Valid {
		return nil
	}
	v := int(n.Int64)
	return &v
}

// rawJSON is a JSON text column as raw JSON, nil for the empty text.
func rawJSON(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// scanString reads a row of one text column.
func scanString(sc scanner) (string, error) {
	var s string
	err := sc.Scan(&s)
	return s, err
}
