package probe

import (
	"bufio"
	"encoding/json"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// What notebook_test.go reads back from testdata/scripts/notebook_shell.py.

type nbCell struct {
	N         int    `json:"n"`
	Src       string `json:"src"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	RSSBefore int64  `json:"rss_before"`
	RSSAfter  int64  `json:"rss_after"`
	OK        bool   `json:"ok"`
}

type nbTensor struct {
	Path   string   `json:"path"`
	Bytes  int64    `json:"bytes"`
	Device string   `json:"device"`
	Dtype  string   `json:"dtype"`
	Shape  []int64  `json:"shape"`
	Cell   string   `json:"cell"`
	Also   []string `json:"also"`
}

type nbWho struct {
	Groups []struct {
		Holder  string     `json:"holder"`
		Bytes   int64      `json:"bytes"`
		Tensors []nbTensor `json:"tensors"`
	} `json:"groups"`
	CUDA []struct {
		Device    string `json:"device"`
		Allocated int64  `json:"allocated_bytes"`
		Named     int64  `json:"named_bytes"`
		Unnamed   int64  `json:"unnamed_bytes"`
		Reserved  int64  `json:"reserved_bytes"`
		Cache     int64  `json:"cache_bytes"`
	} `json:"cuda"`
	Seconds float64 `json:"seconds"`
}

func (w *nbWho) find(path string) (nbTensor, string, bool) {
	for _, g := range w.Groups {
		for _, t := range g.Tensors {
			if t.Path == path {
				return t, g.Holder, true
			}
		}
	}
	return nbTensor{}, "", false
}

func (w *nbWho) group(holder string) bool {
	for _, g := range w.Groups {
		if g.Holder == holder {
			return true
		}
	}
	return false
}

type nbFree struct {
	Steps []struct {
		Step      string `json:"step"`
		What      string `json:"what"`
		Allocated int64  `json:"allocated_freed"`
		Reserved  int64  `json:"reserved_freed"`
		Host      int64  `json:"host_freed"`
	} `json:"steps"`
}

func (f nbFree) step(name string) (a, r, h int64) {
	for _, s := range f.Steps {
		if s.Step == name {
			return s.Allocated, s.Reserved, s.Host
		}
	}
	return -1, -1, -1
}

type nbFacts struct {
	PID           int              `json:"pid"`
	Cells         []nbCell         `json:"cells"`
	Who           *nbWho           `json:"who"`
	WhoAfter      *nbWho           `json:"who_after"`
	WhoText       string           `json:"who_text"`
	Free          nbFree           `json:"free"`
	FreeRSSDrop   int64            `json:"free_rss_drop"`
	Sizes         map[string]int64 `json:"sizes"`
	XSumAfterFree int64            `json:"x_sum_after_free"`
	CellsJSON     struct {
		Cells []struct {
			N     int    `json:"execution_count"`
			First string `json:"first_line"`
			Delta int64  `json:"rss_delta"`
		} `json:"cells"`
	} `json:"cells_json"`
	Quiet, Verbose, Threshold, Status, Help, Pinfo nbCell
	Errors                                         []nbCell            `json:"errors"`
	FreeSteps                                      map[string][]string `json:"free_steps"`
	AfterUnload                                    struct {
		Callbacks int  `json:"callbacks"`
		Magic     bool `json:"magic"`
		Wrapped   bool `json:"do_shutdown_wrapped"`
	} `json:"after_unload"`
	DoShutdown            map[string]any `json:"do_shutdown"`
	TorchImported         bool           `json:"torch_imported"`
	TruePeak              int64          `json:"true_peak"`
	UserPeak              int64          `json:"user_peak"`
	AfterReset            int64          `json:"after_reset"`
	AllocatedAtReset      int64          `json:"allocated_at_reset"`
	BeforeFree, AfterFree struct {
		Allocated   int64 `json:"allocated"`
		Reserved    int64 `json:"reserved"`
		EmptyCaches int   `json:"empty_caches"`
	}
	Enable, Train, StatusOff, Restore, Tmpfs, Unwritable, NoLast, WhoCell nbCell
	InCellSaves                                                           int      `json:"in_cell_saves"`
	Files                                                                 []string `json:"files"`
	WeightsOnly                                                           struct {
		Keys    []string `json:"keys"`
		Format  int      `json:"format"`
		Objects []string `json:"objects"`
		Equal   bool     `json:"equal"`
	} `json:"weights_only"`
	Same         map[string]bool `json:"same"`
	EnvAfterLoad *string         `json:"env_after_load"`
	Weight       []float64       `json:"weight"`
	SavedWeight  []float64       `json:"saved_weight"`
	Last         string          `json:"last"`
	CfgKeys      []string        `json:"cfg_keys"`
}

func (f *nbFacts) UnmarshalJSON(b []byte) error {
	type plain nbFacts
	var aux struct {
		plain
		Quiet      nbCell `json:"quiet"`
		Verbose    nbCell `json:"verbose"`
		Threshold  nbCell `json:"threshold"`
		Status     nbCell `json:"status"`
		Help       nbCell `json:"help"`
		Pinfo      nbCell `json:"pinfo"`
		Enable     nbCell `json:"enable"`
		Train      nbCell `json:"train"`
		StatusOff  nbCell `json:"status_off"`
		Restore    nbCell `json:"restore"`
		Tmpfs      nbCell `json:"tmpfs"`
		Unwritable nbCell `json:"unwritable"`
		NoLast     nbCell `json:"no_last"`
		WhoCell    nbCell `json:"who_cell"`
		BeforeFree struct {
			Allocated   int64 `json:"allocated"`
			Reserved    int64 `json:"reserved"`
			EmptyCaches int   `json:"empty_caches"`
		} `json:"before_free"`
		AfterFree struct {
			Allocated   int64 `json:"allocated"`
			Reserved    int64 `json:"reserved"`
			EmptyCaches int   `json:"empty_caches"`
		} `json:"after_free"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*f = nbFacts(aux.plain)
	f.Quiet, f.Verbose, f.Threshold, f.Status, f.Help, f.Pinfo = aux.Quiet, aux.Verbose, aux.Threshold, aux.Status, aux.Help, aux.Pinfo
	f.Enable, f.Train, f.StatusOff, f.Restore = aux.Enable, aux.Train, aux.StatusOff, aux.Restore
	f.Tmpfs, f.Unwritable, f.NoLast, f.WhoCell = aux.Tmpfs, aux.Unwritable, aux.NoLast, aux.WhoCell
	f.BeforeFree, f.AfterFree = aux.BeforeFree, aux.AfterFree
	return nil
}

// cell is the cell whose source is src, else the first that starts with it.
func (f *nbFacts) cell(prefix string) nbCell {
	for _, c := range f.Cells {
		if c.Src == prefix {
			return c
		}
	}
	for _, c := range f.Cells {
		if strings.HasPrefix(c.Src, prefix) {
			return c
		}
	}
	return nbCell{}
}

const mib = 1 << 20

// near reports whether got is within tol bytes of want.
func near(got, want, tol int64) bool { return got >= want-tol && got <= want+tol }

var lineRE = regexp.MustCompile(`vramguard: In\[(\d+)\] (?:([+-][0-9.]+ [KMG]?i?B) allocated \(peak ([+-][0-9.]+ [KMG]?i?B)\), reserved ([0-9.]+ [KMG]?i?B); )?host ([+-][0-9.]+ [KMG]?i?B) \(peak ([+-][0-9.]+ [KMG]?i?B)\); [0-9.]+ m?s(; raised (\w+))?`)

func parseSize(t *testing.T, s string) int64 {
	t.Helper()
	num, unit, _ := strings.Cut(strings.TrimLeft(s, "+"), " ")
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		t.Fatalf("size %q: %v", s, err)
	}
	m := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
	return int64(v * m)
}

// rawLines is a probe socket that keeps every line as sent: the message
// types of the notebook side are checked field by field.
type rawLines struct {
	ln    net.Listener
	mu    sync.Mutex
	lines []map[string]any
	conns sync.WaitGroup
}

func listenRaw(t *testing.T) *rawLines {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(sockDir(t), "probe.sock"))
	if err != nil {
		t.Fatal(err)
	}
	r := &rawLines{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.conns.Add(1)
			go func() {
				defer r.conns.Done()
				defer c.Close()
				sc := bufio.NewScanner(c)
				sc.Buffer(make([]byte, 1<<20), 1<<20)
				for sc.Scan() {
					var m map[string]any
					if json.Unmarshal(sc.Bytes(), &m) == nil {
						r.mu.Lock()
						r.lines = append(r.lines, m)
						r.mu.Unlock()
					}
				}
			}()
		}
	}()
	return r
}

// all waits (the process has exited) for every connection to end.
func (r *rawLines) all(t *testing.T) []map[string]any {
	t.Helper()
	done := make(chan struct{})
	go func() { r.conns.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the probe's connection did not close")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lines
}

func rawOfType(lines []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, m := range lines {
		if m["type"] == typ {
			out = append(out, m)
		}
	}
	return out
}

func runNotebook(t *testing.T, scenario string, extraEnv ...string) (nbFacts, []map[string]any, int) {
	t.Helper()
	l := listenRaw(t)
	work := t.TempDir()
	env := Env(baseEnv(append([]string{"IPYTHONDIR=" + filepath.Join(work, "ipython")}, extraEnv...)...), probeDir(t),
		Options{Socket: l.ln.Addr().String(), Hz: 1})
	r := runPython(t, env, nil, testdata(t, "scripts/notebook_shell.py"), scenario, work)
	if r.code != 0 {
		t.Fatalf("notebook_shell.py %s: exit %d\nstderr:\n%s", scenario, r.code, r.stderr)
	}
	var f nbFacts
	r.lastJSON(t, &f)
	return f, l.all(t), r.pid
}
