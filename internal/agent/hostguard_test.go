package agent

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestHostGuard(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	h := HostGuard("127.0.0.1:9345", []string{"Dash.Example"}, ok)
	for host, want := range map[string]int{
		"localhost": 200, "LOCALHOST:9345": 200, "localhost.:80": 200, "127.0.0.1": 200, "127.9.9.9:1": 200,
		"[::1]:9345": 200, "::1": 200, "dash.example:9345": 200, "app.localhost": 200,
		"evil.example": 421, "evil.example:9345": 421, "": 421, "localhost.evil.example": 421,
		"10.0.0.1": 421, "127.0.0.1.nip.io": 421,
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/api/v1/runs", nil)
		req.Host = host
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %q: %d, want %d", host, rec.Code, want)
		}
	}
	// Beyond loopback the token guards writes; reads answer any host.
	open := HostGuard("0.0.0.0:9345", nil, ok)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/api/v1/runs", nil)
	req.Host = "evil.example"
	open.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Errorf("non-loopback bind: %d", rec.Code)
	}
}
