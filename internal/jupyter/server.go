// Package jupyter finds running Jupyter servers, talks to their REST API
// with each server's own token, maps kernels to processes and notebooks,
// and installs vramguard's kernelspec. It reads server files and /proc and
// sends only the requests it is asked to (interrupt, restart, shutdown); it
// never signals a process itself.
package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Server is one running Jupyter server as its runtime file describes it
// (jpserver-<pid>.json for jupyter_server, nbserver-<pid>.json for the
// classic notebook server).
type Server struct {
	URL     string `json:"url"`
	BaseURL string `json:"base_url"`
	Token   string `json:"-"`
	PID     int    `json:"pid"`
	Port    int    `json:"port"`
	// Sock is a Unix socket the server listens on instead of a port.
	Sock string `json:"sock,omitempty"`
	// RootDir is the directory notebook paths are relative to.
	RootDir string `json:"root_dir"`
	// File is the runtime file the server was found through.
	File string `json:"file"`
}

// serverFile is the JSON both server kinds write.
type serverFile struct {
	URL         string `json:"url"`
	BaseURL     string `json:"base_url"`
	Token       string `json:"token"`
	PID         int    `json:"pid"`
	Port        int    `json:"port"`
	Sock        string `json:"sock"`
	RootDir     string `json:"root_dir"`
	NotebookDir string `json:"notebook_dir"`
}

// ParseServerFile reads one runtime file.
func ParseServerFile(path string) (Server, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Server{}, err
	}
	var sf serverFile
	if err := json.Unmarshal(b, &sf); err != nil {
		return Server{}, fmt.Errorf("parse %s: %w", path, err)
	}
	if sf.URL == "" && sf.Sock == "" {
		return Server{}, fmt.Errorf("parse %s: no url or sock", path)
	}
	s := Server{URL: sf.URL, BaseURL: sf.BaseURL, Token: sf.Token, PID: sf.PID, Port: sf.Port,
		Sock: sf.Sock, RootDir: sf.RootDir, File: path}
	if s.RootDir == "" {
		s.RootDir = sf.NotebookDir
	}
	if s.BaseURL == "" {
		s.BaseURL = "/"
	}
	return s, nil
}

// dirList is a list of directories in order, each once.
type dirList []string

// add appends d unless it is "" or listed already.
func (l *dirList) add(d string) {
	if d != "" && !slices.Contains(*l, d) {
		*l = append(*l, d)
	}
}

// RuntimeDirs are the directories where servers of this user (and, for
// root, of every user with a home under /home) leave their runtime files,
// in the order Jupyter itself would use them. env looks up variables
// (os.Getenv normally).
func RuntimeDirs(env func(string) string, home string, root bool) []string {
	var dirs dirList
	add := dirs.add
	add(env("JUPYTER_RUNTIME_DIR"))
	add(filepath.Join(DataDir(env, home), "runtime"))
	if root {
		homes, _ := filepath.Glob("/home/*")
		homes = append([]string{"/root"}, homes...)
		for _, h := range homes {
			add(filepath.Join(h, ".local", "share", "jupyter", "runtime"))
		}
	}
	return dirs
}

// DataDir is Jupyter's per-user data directory: $JUPYTER_DATA_DIR, else
// $XDG_DATA_HOME/jupyter, else ~/.local/share/jupyter.
func DataDir(env func(string) string, home string) string {
	if d := env("JUPYTER_DATA_DIR"); d != "" {
		return d
	}
	if x := env("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "jupyter")
	}
	return filepath.Join(home, ".local", "share", "jupyter")
}

// Discover reads the runtime files in dirs and returns the servers whose
// process is still alive (stale files of crashed servers are skipped), one
// per pid, newest file first.
func Discover(dirs []string) ([]Server, error) {
	var out []Server
	seen := map[string]bool{}
	var errs []error
	for _, d := range dirs {
		var files []string
		for _, pat := range []string{"jpserver-*.json", "nbserver-*.json"} {
			m, _ := filepath.Glob(filepath.Join(d, pat))
			files = append(files, m...)
		}
		for _, f := range files {
			s, err := ParseServerFile(f)
			if err != nil {
				if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrPermission) {
					errs = append(errs, err)
				}
				continue
			}
			if s.PID > 0 && !alive(s.PID) {
				continue
			}
			key := s.URL + "|" + s.Sock
			if seen[key] {
				continue
			}
			seen[key] = true
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, errors.Join(errs...)
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Client talks to one server's REST API.
type Client struct {
	Server Server
	HTTP   *http.Client
}

// NewClient returns a client for s with a short timeout; a server that
// listens on a Unix socket is reached through it.
func NewClient(s Server, timeout time.Duration) *Client {
	tr := &http.Transport{}
	if s.Sock != "" {
		sock := s.Sock
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
	}
	return &Client{Server: s, HTTP: &http.Client{Timeout: timeout, Transport: tr}}
}

// Endpoint is the URL of an API path (e.g. "api/kernels").
func (c *Client) Endpoint(p string) string {
	base := c.Server.URL
	if c.Server.Sock != "" || base == "" {
		base = "http://localhost" + c.Server.BaseURL
	}
	u, err := url.Parse(base)
	if err != nil {
		return strings.TrimRight(base, "/") + "/" + p
	}
	u.RawQuery = ""
	u.Path = strings.TrimRight(u.Path, "/") + "/" + p
	return u.String()
}

// Do sends one authenticated request and decodes a JSON answer into out
// (when out is not nil).
func (c *Client) Do(ctx context.Context, method, p string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Endpoint(p), rd)
	if err != nil {
		return err
	}
	if c.Server.Token != "" {
		req.Header.Set("Authorization", "token "+c.Server.Token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, c.Endpoint(p), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, c.Endpoint(p), err)
	}
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(b))
		var je struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &je) == nil && je.Message != "" {
			msg = je.Message
		}
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		return fmt.Errorf("%s %s: %s: %s", method, c.Endpoint(p), resp.Status, msg)
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode: %w", method, c.Endpoint(p), err)
		}
	}
	return nil
}

// Kernel is a kernel as /api/kernels describes it.
type Kernel struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	LastActivity   time.Time `json:"last_activity"`
	ExecutionState string    `json:"execution_state"`
	Connections    int       `json:"connections"`
}

// Session ties a notebook (or console) to a kernel.
type Session struct {
	ID     string `json:"id"`
	Path   string `json:"path"`
	Name   string `json:"name"`
	Type   string `json:"type"`
	Kernel Kernel `json:"kernel"`
}

// Kernels lists the server's kernels.
func (c *Client) Kernels(ctx context.Context) ([]Kernel, error) {
	var ks []Kernel
	err := c.Do(ctx, http.MethodGet, "api/kernels", nil, &ks)
	return ks, err
}

// Sessions lists the server's sessions.
func (c *Client) Sessions(ctx context.Context) ([]Session, error) {
	var ss []Session
	err := c.Do(ctx, http.MethodGet, "api/sessions", nil, &ss)
	return ss, err
}

// CreateSession opens (or returns the existing) session for a notebook path
// with a kernel of the given kernelspec.
func (c *Client) CreateSession(ctx context.Context, path, kernelName string) (Session, error) {
	var s Session
	body := map[string]any{"path": path, "name": filepath.Base(path), "type": "notebook", "kernel": map[string]string{"name": kernelName}}
	err := c.Do(ctx, http.MethodPost, "api/sessions", body, &s)
	return s, err
}

// Interrupt interrupts a kernel's current execution.
func (c *Client) Interrupt(ctx context.Context, kernelID string) error {
	return c.Do(ctx, http.MethodPost, "api/kernels/"+url.PathEscape(kernelID)+"/interrupt", nil, nil)
}

// Restart restarts a kernel (same id, fresh process).
func (c *Client) Restart(ctx context.Context, kernelID string) error {
	return c.Do(ctx, http.MethodPost, "api/kernels/"+url.PathEscape(kernelID)+"/restart", nil, nil)
}

// Shutdown shuts a kernel down. With a session id the session goes too, as
// when a notebook is closed with "Shut Down Kernel" in the front end.
func (c *Client) Shutdown(ctx context.Context, sessionID, kernelID string) error {
	if sessionID != "" {
		return c.Do(ctx, http.MethodDelete, "api/sessions/"+url.PathEscape(sessionID), nil, nil)
	}
	return c.Do(ctx, http.MethodDelete, "api/kernels/"+url.PathEscape(kernelID), nil, nil)
}
