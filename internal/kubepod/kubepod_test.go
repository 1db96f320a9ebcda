package kubepod_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/kubepod"
	"github.com/vramguard/vramguard/internal/kubepod/kubepodtest"
)

// TestPodEnd: a job in a pod sent SIGTERM, its pod read from a TLS API
// server (its own CA, the token checked) serving the pod as Kubernetes
// does (testdata: a DisruptionTarget condition of each kind, none), and the
// reason diagnose gives with it: preempted with the condition's message and
// the deletion's grace as evidence, node_failure for a taint manager's
// deletion, interrupted as before when nothing says more; a 403 says which
// permission to grant, and a server that does not answer costs the timeout,
// not more.
func TestPodEnd(t *testing.T) {
	sigAt := time.Date(2026, 12, 3, 11, 40, 12, 500e6, time.UTC)
	cases := []struct {
		name     string
		fixture  string
		mode     kubepodtest.Mode
		reason   string
		summary  string
		evidence []string // each is in one line of the evidence
	}{
		{name: "preempted", fixture: "preempted.json", reason: diagnose.Preempted,
			summary: "preempted by the scheduler for a higher-priority pod",
			evidence: []string{"pod ml/train-7f9c4 DisruptionTarget: PreemptionByScheduler: default-scheduler: preempting to accommodate a higher priority pod (at 2026-12-03T11:40:12Z)",
				"a grace of 30s (terminationGracePeriodSeconds): SIGKILL at 2026-12-03T11:40:42Z, 29.5s after the SIGTERM came"}},
		{name: "evicted", fixture: "evicted.json", reason: diagnose.Preempted,
			summary:  "evicted through the Eviction API",
			evidence: []string{"DisruptionTarget: EvictionByEvictionAPI: Eviction API: evicting", "a grace of 2m0s"}},
		{name: "taint manager", fixture: "taint.json", reason: diagnose.NodeFailure,
			summary:  "its node failed or became unreachable",
			evidence: []string{"DisruptionTarget: DeletionByTaintManager: Taint manager: deleting due to NoExecute taint"}},
		{name: "no condition", fixture: "none.json", reason: diagnose.Interrupted,
			summary:  "stopped by the user",
			evidence: []string{"pod ml/train-7f9c4 has no DisruptionTarget condition", "the pod was not being deleted when read; its grace is 30s"}},
		{name: "forbidden", fixture: "preempted.json", mode: kubepodtest.Forbidden, reason: diagnose.Interrupted,
			summary:  "stopped by the user",
			evidence: []string{"403 Forbidden", `cannot get resource \"pods\"`, "grant the pod's service account `get` on `pods` in namespace ml"}},
		{name: "timeout", fixture: "preempted.json", mode: kubepodtest.Hang, reason: diagnose.Interrupted,
			summary:  "stopped by the user",
			evidence: []string{"pod ml/train-7f9c4 was not read: the API server at 127.0.0.1:", "did not answer within 300ms"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pod, err := os.ReadFile(filepath.Join("testdata", c.fixture))
			if err != nil {
				t.Fatal(err)
			}
			srv := kubepodtest.Start(t, "ml", "train-7f9c4", pod, c.mode)
			cfg, ok := kubepod.FromEnv(getenv(srv.Env))
			if !ok {
				t.Fatal("FromEnv: not in a pod")
			}
			cfg.Timeout = 300 * time.Millisecond
			t0 := time.Now()
			p, err := kubepod.Read(context.Background(), cfg)
			took := time.Since(t0)
			st := &diagnose.Stop{Signal: syscall.SIGTERM, At: sigAt}
			if err != nil {
				st.Notes = append(st.Notes, err.Error())
			} else {
				sched, notes := p.Lines(sigAt)
				st.Scheduler, st.Notes = sched, notes
			}
			if c.mode == kubepodtest.Hang && took > 5*time.Second {
				t.Errorf("a hanging API server held the read %v", took)
			}
			if srv.Requests.Load() != 1 {
				t.Errorf("%d requests reached the pod with the token, want 1", srv.Requests.Load())
			}
			v := diagnose.Classify(diagnose.Input{Interrupted: true, Stop: st, Signal: syscall.SIGTERM})
			if v.Reason != c.reason || !strings.Contains(v.Summary, c.summary) {
				t.Errorf("reason %q (%s), want %q (%s)\nevidence: %q", v.Reason, v.Summary, c.reason, c.summary, v.Evidence)
			}
			for _, want := range c.evidence {
				if !slices.ContainsFunc(v.Evidence, func(l string) bool { return strings.Contains(l, want) }) {
					t.Errorf("no evidence line holds %q:\n%s", want, strings.Join(v.Evidence, "\n"))
				}
			}
		})
	}
}

// TestReadRefuses: the token and the CA are what the server checks and
// what the client checks: a wrong token is the API server's 401, a CA that
// did not sign the server's certificate fails the TLS handshake, and a pod
// of another name is the API server's 404 with the advice to set POD_NAME.
func TestReadRefuses(t *testing.T) {
	pod, err := os.ReadFile(filepath.Join("testdata", "preempted.json"))
	if err != nil {
		t.Fatal(err)
	}
	srv := kubepodtest.Start(t, "ml", "train-7f9c4", pod, kubepodtest.OK)
	cfg, _ := kubepod.FromEnv(getenv(srv.Env))
	cases := []struct {
		name string
		edit func(c *kubepod.Config)
		want string
	}{
		{"wrong token", func(c *kubepod.Config) {
			c.Dir = t.TempDir()
			copyFile(t, filepath.Join(srv.Dir, "ca.crt"), filepath.Join(c.Dir, "ca.crt"))
			copyFile(t, filepath.Join(srv.Dir, "namespace"), filepath.Join(c.Dir, "namespace"))
			if err := os.WriteFile(filepath.Join(c.Dir, "token"), []byte("not-the-token"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "401 Unauthorized"},
		{"another CA", func(c *kubepod.Config) {
			c.Dir = t.TempDir()
			copyFile(t, filepath.Join(srv.Dir, "token"), filepath.Join(c.Dir, "token"))
			copyFile(t, filepath.Join(srv.Dir, "namespace"), filepath.Join(c.Dir, "namespace"))
			if err := os.WriteFile(filepath.Join(c.Dir, "ca.crt"), selfSigned(t), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "certificate signed by unknown authority"},
		{"another pod", func(c *kubepod.Config) { c.Pod = "train-x" }, "no such pod (404); set POD_NAME"},
		{"no token", func(c *kubepod.Config) { c.Dir = t.TempDir() }, "no service account token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cc := cfg
			c.edit(&cc)
			_, err := kubepod.Read(context.Background(), cc)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one holding %q", err, c.want)
			}
		})
	}
}

// TestFromEnv: a pod's name is POD_NAME, else HOSTNAME; outside a pod
// there is nothing to read.
func TestFromEnv(t *testing.T) {
	if _, ok := kubepod.FromEnv(getenv([]string{"HOSTNAME=h"})); ok {
		t.Fatal("in a pod without KUBERNETES_SERVICE_HOST")
	}
	c, ok := kubepod.FromEnv(getenv([]string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "HOSTNAME=train-abc"}))
	if !ok || c.Pod != "train-abc" || c.Port != "443" || c.Dir != kubepod.DefaultServiceAccountDir {
		t.Fatalf("%+v", c)
	}
	c, _ = kubepod.FromEnv(getenv([]string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=6443", "HOSTNAME=h", "POD_NAME=train-abc"}))
	if c.Pod != "train-abc" || c.Port != "6443" {
		t.Fatalf("%+v", c)
	}
}

func getenv(env []string) func(string) string {
	return func(k string) string {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v
			}
		}
		return ""
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// selfSigned is a CA certificate of its own, which signed nothing the
// server holds.
func selfSigned(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
