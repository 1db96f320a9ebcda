// Package kubepodtest is a fake Kubernetes API server for tests: TLS with
// its own CA, a service account directory (token, ca.crt, namespace) and
// the environment of a process in a pod pointed at it. It answers GET
// /api/v1/namespaces/NS/pods/NAME as the API server does: the pod's JSON to
// the right bearer token, 401 to another, 403 when told (no RBAC grant),
// 404 for another pod, and no answer at all when told to hang.
package kubepodtest

import (
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/kubepod"
)

// Mode is how the server answers.
type Mode int

const (
	OK        Mode = iota // the pod's JSON
	Forbidden             // 403, the API server's Status for a missing RBAC grant
	Hang                  // no answer until the client gives up (or 10 s)
)

// Server is a running fake API server.
type Server struct {
	*httptest.Server
	// Dir is the service account directory; Env the variables of a process
	// in the pod (KUBERNETES_SERVICE_HOST/PORT, POD_NAME,
	// VRAMGUARD_SERVICEACCOUNT_DIR).
	Dir string
	Env []string
	// Requests counts the requests that reached a pod's path with the
	// right token.
	Requests atomic.Int64
}

// Token is the service account's token the server accepts.
const Token = "eyJhbGciOiJSUzI1NiIsImtpZCI6InRlc3QifQ.vramguard-test-token.sig"

// Start serves pod (its JSON) as NAMESPACE/NAME in mode until t ends.
func Start(t testing.TB, namespace, name string, pod []byte, mode Mode) *Server {
	t.Helper()
	s := &Server{}
	path := "/api/v1/namespaces/" + namespace + "/pods/" + name
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer "+Token {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
			return
		}
		if r.Method != http.MethodGet || r.URL.Path != path {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods %q not found","reason":"NotFound","details":{"name":%q,"kind":"pods"},"code":404}`, filepath.Base(r.URL.Path), filepath.Base(r.URL.Path))
			return
		}
		s.Requests.Add(1)
		switch mode {
		case Forbidden:
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods %q is forbidden: User \"system:serviceaccount:%s:default\" cannot get resource \"pods\" in API group \"\" in the namespace %q","reason":"Forbidden","details":{"name":%q,"kind":"pods"},"code":403}`, name, namespace, namespace, name)
		case Hang:
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		default:
			_, _ = w.Write(pod)
		}
	}))
	s.StartTLS()
	t.Cleanup(s.Close)
	s.Dir = t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	for f, b := range map[string][]byte{"token": []byte(Token), "ca.crt": ca, "namespace": []byte(namespace)} {
		if err := os.WriteFile(filepath.Join(s.Dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	host, port, err := net.SplitHostPort(s.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s.Env = []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port,
		"POD_NAME=" + name, kubepod.EnvServiceAccountDir + "=" + s.Dir}
	return s
}
