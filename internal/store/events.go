// A run's events: what happened in each of its attempts (timeline.Event).

package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/timeline"
)

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
	return queryAll(ctx, s.db, "read events", func(sc scanner) (*Event, error) {
		e := Event{RunID: runID}
		var t int64
		var data string
		if err := sc.Scan(&e.ID, &e.Attempt, &t, &e.Kind, &e.Message, &data); err != nil {
			return nil, err
		}
		e.T, e.Data = time.UnixMilli(t), rawJSON(data)
		return &e, nil
	}, q, args...)
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
