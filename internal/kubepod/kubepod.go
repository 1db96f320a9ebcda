// Package kubepod reads the pod a process runs in from the Kubernetes API
// server, in-cluster (the service account's token and CA, the API server's
// address from the environment), to say how the pod was ended: its
// DisruptionTarget condition (PreemptionByScheduler, EvictionByEvictionAPI,
// TerminationByKubelet, DeletionByTaintManager, ...) and the grace its
// deletion was given.
//
// It makes one outbound GET, bounded by a short timeout, and only when the
// process runs in a pod; it listens on nothing. Its lines feed diagnose.Stop
// (Scheduler for what names the end, Notes for the rest).
package kubepod

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultServiceAccountDir is where Kubernetes mounts a pod's service
// account: token, ca.crt, namespace.
const DefaultServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// EnvServiceAccountDir names another directory with the same three files
// (a projected volume mounted elsewhere).
const EnvServiceAccountDir = "VRAMGUARD_SERVICEACCOUNT_DIR"

// DefaultTimeout bounds the whole read: the job has ended, and its
// post-mortem waits for this at most.
const DefaultTimeout = 2 * time.Second

// maxBody bounds what is read of the API server's answer (a pod's JSON is
// a few KiB; managed fields can make it tens).
const maxBody = 4 << 20

// Config is where the pod and the API server are: read from a process's
// environment by FromEnv.
type Config struct {
	// Host and Port of the API server ($KUBERNETES_SERVICE_HOST,
	// $KUBERNETES_SERVICE_PORT).
	Host, Port string
	// Dir holds token, ca.crt and namespace.
	Dir string
	// Pod is the pod's name: $POD_NAME (the downward API), else $HOSTNAME
	// (a pod's hostname is its name unless spec.hostname sets another).
	Pod string
	// Timeout bounds the read (DefaultTimeout when 0).
	Timeout time.Duration
}

// FromEnv is the Config of a process with environment getenv; ok is false
// outside a pod (no KUBERNETES_SERVICE_HOST).
func FromEnv(getenv func(string) string) (Config, bool) {
	c := Config{
		Host: strings.TrimSpace(getenv("KUBERNETES_SERVICE_HOST")),
		Port: strings.TrimSpace(getenv("KUBERNETES_SERVICE_PORT")),
		Dir:  getenv(EnvServiceAccountDir),
		Pod:  strings.TrimSpace(getenv("POD_NAME")),
	}
	if c.Host == "" {
		return Config{}, false
	}
	if c.Port == "" {
		c.Port = "443"
	}
	if c.Dir == "" {
		c.Dir = DefaultServiceAccountDir
	}
	if c.Pod == "" {
		c.Pod = strings.TrimSpace(getenv("HOSTNAME"))
	}
	if c.Pod == "" {
		if h, err := os.Hostname(); err == nil {
			c.Pod = h
		}
	}
	return c, true
}

// Condition is one of a pod's status conditions.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason"`
	Message            string    `json:"message"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

// Pod is what is read of a pod.
type Pod struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		// DeletionTimestamp is when the pod is to be gone: the deletion's
		// request time plus its grace period (the kubelet's SIGKILL comes
		// then); nil while no deletion was asked.
		DeletionTimestamp          *time.Time `json:"deletionTimestamp"`
		DeletionGracePeriodSeconds *int64     `json:"deletionGracePeriodSeconds"`
	} `json:"metadata"`
	Spec struct {
		TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds"`
	} `json:"spec"`
	Status struct {
		Phase      string      `json:"phase"`
		Reason     string      `json:"reason"`
		Message    string      `json:"message"`
		Conditions []Condition `json:"conditions"`
	} `json:"status"`
}

// Disruption is the pod's DisruptionTarget condition when it is True, nil
// when there is none.
func (p *Pod) Disruption() *Condition {
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.Type == "DisruptionTarget" && c.Status == "True" {
			return c
		}
	}
	return nil
}

// Grace is the grace period of the pod's deletion (its
// deletionGracePeriodSeconds, else the spec's
// terminationGracePeriodSeconds), and whether one is known.
func (p *Pod) Grace() (time.Duration, bool) {
	s := p.Metadata.DeletionGracePeriodSeconds
	if s == nil {
		s = p.Spec.TerminationGracePeriodSeconds
	}
	if s == nil {
		return 0, false
	}
	return time.Duration(*s) * time.Second, true
}

// Error is a read that failed: Line is what the post-mortem says of it.
type Error struct {
	Status int // the HTTP status, 0 when none came
	Line   string
}

func (e *Error) Error() string { return e.Line }

// Read gets the pod from the API server: GET
// /api/v1/namespaces/NS/pods/NAME with the service account's bearer token,
// the server verified against the service account's CA, within c.Timeout.
// Errors are *Error, whose line says what failed and what to do.
func Read(ctx context.Context, c Config) (*Pod, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fail := func(status int, f string, a ...any) error {
		return &Error{Status: status, Line: fmt.Sprintf(f, a...)}
	}
	token, err := os.ReadFile(filepath.Join(c.Dir, "token"))
	if err != nil {
		return nil, fail(0, "the pod was not read: no service account token (%v); mount one (automountServiceAccountToken: true)", err)
	}
	nsb, err := os.ReadFile(filepath.Join(c.Dir, "namespace"))
	if err != nil {
		return nil, fail(0, "the pod was not read: its namespace is unknown (%v)", err)
	}
	ns := strings.TrimSpace(string(nsb))
	caPEM, err := os.ReadFile(filepath.Join(c.Dir, "ca.crt"))
	if err != nil {
		return nil, fail(0, "the pod was not read: no CA to verify the API server (%v)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fail(0, "the pod was not read: %s holds no PEM certificate", filepath.Join(c.Dir, "ca.crt"))
	}
	if c.Pod == "" {
		return nil, fail(0, "the pod was not read: its name is unknown (set POD_NAME from the downward API: fieldRef metadata.name)")
	}
	u := url.URL{Scheme: "https", Host: net.JoinHostPort(c.Host, c.Port),
		Path: "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + url.PathEscape(c.Pod)}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fail(0, "the pod was not read: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		Proxy:           nil, // the API server is reached directly, as client-go does in-cluster
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	what := fmt.Sprintf("pod %s/%s", ns, c.Pod)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fail(0, "%s was not read: the API server at %s did not answer within %s", what, u.Host, timeout)
		}
		return nil, fail(0, "%s was not read from the API server at %s: %v", what, u.Host, trimErr(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fail(resp.StatusCode, "%s was not read: %v", what, trimErr(err))
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusForbidden:
		return nil, fail(resp.StatusCode, "%s was not read: the API server refused (403 Forbidden: %s); grant the pod's service account `get` on `pods` in namespace %s (a Role and RoleBinding, docs/CLUSTER.md)", what, statusMessage(body), ns)
	case http.StatusUnauthorized:
		return nil, fail(resp.StatusCode, "%s was not read: the API server did not accept the service account's token (401 Unauthorized)", what)
	case http.StatusNotFound:
		return nil, fail(resp.StatusCode, "%s was not read: no such pod (404); set POD_NAME from the downward API (fieldRef metadata.name) when the hostname is not the pod's name", what)
	default:
		return nil, fail(resp.StatusCode, "%s was not read: the API server answered %s: %s", what, resp.Status, statusMessage(body))
	}
	p := &Pod{}
	if err := json.Unmarshal(body, p); err != nil {
		return nil, fail(resp.StatusCode, "%s was not read: its JSON does not parse: %v", what, err)
	}
	return p, nil
}

// statusMessage is a Status object's message, or the body's start.
func statusMessage(body []byte) string {
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		return st.Message
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func trimErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// Lines is what the pod says of its end, for diagnose.Stop: scheduler, the
// DisruptionTarget condition's line ("pod NS/NAME DisruptionTarget:
// PreemptionByScheduler: default-scheduler: preempting to accommodate a
// higher priority pod (at …)"), which names the reason; notes, the rest
// (the deletion's grace and deadline, or that the pod has no such
// condition). sigAt is when the job's SIGTERM came (zero: unknown).
func (p *Pod) Lines(sigAt time.Time) (scheduler, notes []string) {
	what := "pod " + p.Metadata.Namespace + "/" + p.Metadata.Name
	if c := p.Disruption(); c != nil {
		l := fmt.Sprintf("%s DisruptionTarget: %s: %s", what, c.Reason, c.Message)
		if !c.LastTransitionTime.IsZero() {
			l += " (at " + c.LastTransitionTime.UTC().Format(time.RFC3339) + ")"
		}
		scheduler = append(scheduler, l)
	} else {
		n := what + " has no DisruptionTarget condition: nothing in the pod says it was preempted or evicted (a deletion by its owner, kubectl delete, or a cluster without pod disruption conditions)"
		if p.Status.Reason != "" {
			n = fmt.Sprintf("%s has no DisruptionTarget condition; its status says %s: %s", what, p.Status.Reason, p.Status.Message)
		}
		notes = append(notes, n)
	}
	g, ok := p.Grace()
	switch dl := p.Metadata.DeletionTimestamp; {
	case dl != nil && ok:
		n := fmt.Sprintf("the pod's deletion gave it a grace of %s (terminationGracePeriodSeconds): SIGKILL at %s", g, dl.UTC().Format(time.RFC3339))
		if !sigAt.IsZero() {
			n += fmt.Sprintf(", %s after the SIGTERM came", dl.Sub(sigAt).Round(100*time.Millisecond))
		}
		notes = append(notes, n)
	case dl != nil:
		notes = append(notes, "the pod is to be gone by "+dl.UTC().Format(time.RFC3339))
	case ok:
		notes = append(notes, fmt.Sprintf("the pod was not being deleted when read; its grace is %s (terminationGracePeriodSeconds)", g))
	}
	return scheduler, notes
}
