package agent

import (
	"net"
	"net/http"
	"strings"
)

// HostGuard protects an agent bound to loopback from DNS rebinding: a page
// on evil.example whose name a resolver later points at 127.0.0.1 reaches
// the agent from the user's browser with "Host: evil.example", and would
// read every run's command and working directory. When listen is a loopback
// address, HostGuard answers 421 to any request whose Host is neither a
// loopback name (localhost, 127.0.0.0/8, [::1], any port) nor one of
// allowed (names as given to --allowed-host, compared without the port and
// case). On any other address next is returned as it is.
func HostGuard(listen string, allowed []string, next http.Handler) http.Handler {
	host, _, err := net.SplitHostPort(listen)
	if err != nil || !IsLoopback(host) {
		return next
	}
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[normalHost(a)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := normalHost(r.Host)
		if !ok[h] && !loopbackHost(h) {
			writeErr(w, http.StatusMisdirectedRequest,
				"this agent listens on loopback and answers only for localhost; host %q is not allowed (vramguard serve --allowed-host NAME)", r.Host)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// normalHost is a Host header without its port, brackets and trailing
// dot, in lower case.
func normalHost(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(h, ".")
}

// loopbackHost reports whether a normalised host names the loopback
// interface: localhost (or a name below it, which resolvers keep on
// loopback), 127.0.0.0/8 or ::1.
func loopbackHost(h string) bool {
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
