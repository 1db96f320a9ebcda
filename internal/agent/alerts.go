package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/vramguard/vramguard/internal/store"
)

// AlertConfig says when alerts are raised and where they go.
type AlertConfig struct {
	// UnsavedAfter raises unsaved_work when a probed job has gone this long
	// without a checkpoint (0: never).
	UnsavedAfter time.Duration
	// Webhook receives each alert as a JSON POST ("" : none).
	Webhook string
	// QueueSize bounds the alerts waiting for the webhook; when full the
	// oldest is dropped (default 256).
	QueueSize int
	// Retries is how many times a failed POST is retried (default 5), with
	// Backoff doubling from its start value (default 1s, at most 1 minute).
	Retries int
	Backoff time.Duration
	// Timeout bounds one POST (default 10s).
	Timeout time.Duration
}

// Alert is what the log and the webhook receive.
type Alert struct {
	Kind    string          `json:"kind"`
	Job     string          `json:"job"`
	JobKey  string          `json:"job_key"`
	Time    time.Time       `json:"time"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
	Host    string          `json:"host,omitempty"`
	EventID int64           `json:"event_id"`
	// User is the job's owner, for a bridge that routes alerts to people
	// (set where the event names one: idle, reclaim).
	User string `json:"user,omitempty"`
}

// AlertStats counts what happened to alerts.
type AlertStats struct {
	Raised    map[string]uint64 `json:"raised"`
	Delivered uint64            `json:"delivered"`
	Failed    uint64            `json:"failed"` // POST attempts that failed
	Dropped   uint64            `json:"dropped"`
	Queued    int               `json:"queued"`
}

// Alerts logs alerts and delivers them to a webhook through a bounded queue,
// retrying with exponential backoff. Safe for concurrent use.
type Alerts struct {
	cfg    AlertConfig
	log    *slog.Logger
	now    func() time.Time
	client *http.Client
	// Host names the machine in webhook payloads.
	Host string

	mu     sync.Mutex
	queue  []Alert
	wake   chan struct{}
	stats  AlertStats
	recent []Alert
}

// NewAlerts returns an alert dispatcher.
func NewAlerts(cfg AlertConfig, log *slog.Logger, now func() time.Time) *Alerts {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 256
	}
	if cfg.Retries <= 0 {
		cfg.Retries = 5
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	return &Alerts{cfg: cfg, log: log, now: now, client: &http.Client{Timeout: cfg.Timeout},
		wake: make(chan struct{}, 1), stats: AlertStats{Raised: map[string]uint64{}}}
}

// Raise logs the alert of event e and queues it for the webhook.
func (al *Alerts) Raise(e *store.AgentEvent) {
	a := Alert{Kind: e.Kind, Job: e.JobName, JobKey: e.JobKey, Time: e.T, Message: e.Message, Data: e.Data, Host: al.Host, EventID: e.ID}
	var who struct {
		User string `json:"user"`
	}
	if len(e.Data) > 0 && json.Unmarshal(e.Data, &who) == nil {
		a.User = who.User
	}
	al.log.Warn("alert", "kind", a.Kind, "job", a.Job, "message", a.Message)
	al.mu.Lock()
	al.stats.Raised[a.Kind]++
	al.recent = append(al.recent, a)
	if len(al.recent) > 100 {
		al.recent = al.recent[len(al.recent)-100:]
	}
	if al.cfg.Webhook != "" {
		if len(al.queue) >= al.cfg.QueueSize {
			al.queue = al.queue[1:]
			al.stats.Dropped++
		}
		al.queue = append(al.queue, a)
	}
	al.mu.Unlock()
	select {
	case al.wake <- struct{}{}:
	default:
	}
}

// Stats returns the counters.
func (al *Alerts) Stats() AlertStats {
	al.mu.Lock()
	defer al.mu.Unlock()
	s := al.stats
	s.Raised = make(map[string]uint64, len(al.stats.Raised))
	for k, v := range al.stats.Raised {
		s.Raised[k] = v
	}
	s.Queued = len(al.queue)
	return s
}

// Recent returns the latest alerts, oldest first.
func (al *Alerts) Recent() []Alert {
	al.mu.Lock()
	defer al.mu.Unlock()
	return append([]Alert{}, al.recent...)
}

// Run delivers queued alerts until ctx ends.
func (al *Alerts) Run(ctx context.Context) {
	if al.cfg.Webhook == "" {
		return
	}
	for {
		al.mu.Lock()
		var a *Alert
		if len(al.queue) > 0 {
			x := al.queue[0]
			al.queue = al.queue[1:]
			a = &x
		}
		al.mu.Unlock()
		if a == nil {
			select {
			case <-ctx.Done():
				return
			case <-al.wake:
				continue
			}
		}
		al.deliver(ctx, *a)
	}
}

// deliver POSTs a, retrying with backoff; a 4xx other than 408/429 is not
// retried (the receiver will not change its mind).
func (al *Alerts) deliver(ctx context.Context, a Alert) {
	body, _ := json.Marshal(a)
	wait := al.cfg.Backoff
	for try := 0; try <= al.cfg.Retries; try++ {
		if try > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			wait = min(2*wait, time.Minute)
		}
		err := al.post(ctx, body)
		if err == nil {
			al.mu.Lock()
			al.stats.Delivered++
			al.mu.Unlock()
			return
		}
		al.mu.Lock()
		al.stats.Failed++
		al.mu.Unlock()
		al.log.Warn("webhook", "try", try+1, "err", err)
		if permanent(err) {
			break
		}
	}
	al.mu.Lock()
	al.stats.Dropped++
	al.mu.Unlock()
}

type statusError int

func (e statusError) Error() string { return fmt.Sprintf("webhook answered %d", int(e)) }

func permanent(err error) bool {
	s, ok := err.(statusError)
	return ok && s >= 400 && s < 500 && s != 408 && s != 429
}

func (al *Alerts) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, al.cfg.Webhook, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "vramguard")
	resp, err := al.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return statusError(resp.StatusCode)
	}
	return nil
}
