package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramguard/vramguard/internal/testbin"
)

// server is a running `vramguard serve`.
type server struct {
	URL  string
	Home string
	cmd  *exec.Cmd
	errb *bytes.Buffer
}

// startServe starts `vramguard serve --listen 127.0.0.1:0 --json ARGS...`
// with its own state directory and waits for its startup line.
func startServe(t *testing.T, home string, args ...string) *server {
	t.Helper()
	if home == "" {
		home = t.TempDir()
	}
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--json"}, args...)...)
	cmd.Env = append(os.Environ(), "VRAMGUARD_HOME="+home)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		var b strings.Builder
		for sc.Scan() {
			b.WriteString(sc.Text())
			if sc.Text() == "}" {
				line <- b.String()
				break
			}
		}
		io.Copy(io.Discard, out)
	}()
	var start struct{ URL string }
	select {
	case l := <-line:
		if err := json.Unmarshal([]byte(l), &start); err != nil {
			t.Fatalf("serve startup line %q: %v", l, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start: %s", errb.String())
	}
	s := &server{URL: strings.TrimSuffix(start.URL, "/"), Home: home, cmd: cmd, errb: &errb}
	waitOK(t, 20*time.Second, "serve's first sample", s.URL+"/healthz")
	return s
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// waitOK waits up to d (failing t after it) for GET url to answer 200.
func waitOK(t *testing.T, d time.Duration, what, url string) {
	t.Helper()
	waitFor(t, d, what, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// browser is a headless Chromium driven through chromedriver's W3C
// WebDriver HTTP API (Debian packages chromium and chromium-driver).
type browser struct {
	t       *testing.T
	base    string
	session string
}

func startBrowser(t *testing.T) *browser {
	t.Helper()
	testbin.Need(t, testbin.Chromium, testbin.ChromeDriver)
	port := testbin.FreePort(t)
	drv := exec.Command("chromedriver", fmt.Sprintf("--port=%d", port))
	var logb bytes.Buffer
	drv.Stdout, drv.Stderr = &logb, &logb
	drv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := drv.Start(); err != nil {
		t.Fatalf("start chromedriver (Debian package chromium-driver): %v", err)
	}
	t.Cleanup(func() { syscall.Kill(-drv.Process.Pid, syscall.SIGKILL); drv.Wait() })
	b := &browser{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	waitOK(t, 20*time.Second, "chromedriver", b.base+"/status")
	profile := t.TempDir()
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{
			"binary": "/usr/bin/chromium",
			"args": []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
				"--disable-background-networking", "--disable-component-update", "--disable-sync",
				"--disable-dev-shm-usage", "--window-size=1400,1000", "--user-data-dir=" + profile},
		},
	}}}
	var res struct {
		Value struct {
			SessionID string `json:"sessionId"`
			Message   string `json:"message"`
		} `json:"value"`
	}
	b.call("POST", "/session", caps, &res)
	if res.Value.SessionID == "" {
		t.Fatalf("no WebDriver session: %s\n%s", res.Value.Message, logb.String())
	}
	b.session = res.Value.SessionID
	t.Cleanup(func() { b.call("DELETE", "/session/"+b.session, nil, nil) })
	return b
}

func (b *browser) call(method, path string, body, out any) {
	b.t.Helper()
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, b.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatalf("webdriver %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 && method != "DELETE" {
		b.t.Fatalf("webdriver %s %s: %d %s", method, path, resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			b.t.Fatalf("webdriver %s %s: %v: %s", method, path, err, data)
		}
	}
}

func (b *browser) open(url string) {
	b.t.Helper()
	b.call("POST", "/session/"+b.session+"/url", map[string]any{"url": url}, nil)
}

// eval runs a script body (`return ...`) in the page and decodes its result.
func (b *browser) eval(script string, out any) {
	b.t.Helper()
	var res struct {
		Value json.RawMessage `json:"value"`
	}
	b.call("POST", "/session/"+b.session+"/execute/sync", map[string]any{"script": script, "args": []any{}}, &res)
	if out != nil {
		if err := json.Unmarshal(res.Value, out); err != nil {
			b.t.Fatalf("script result %s: %v", res.Value, err)
		}
	}
}

// waitTrue polls a boolean script until it is true.
func (b *browser) waitTrue(d time.Duration, what, script string) {
	b.t.Helper()
	waitFor(b.t, d, what, func() bool {
		var ok bool
		b.eval(script, &ok)
		return ok
	})
}

func jsonDecode(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }
