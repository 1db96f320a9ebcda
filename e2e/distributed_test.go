package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/testbin"
	"golang.org/x/sys/unix"
)

// TestDistributedFirstFailure: 3 real ranks on the CPU (torch.distributed,
// gloo), under mp.spawn and under a plain launcher that gives each the
// environment torchrun sets. Rank 1, between the others, dies (a CUDA OOM message raised, a real
// OOM kill under --memory-limit, a real SIGSEGV) while the others wait for
// it in an all_reduce and then fail (their connections to it close; mp.spawn
// stops them). explain --json names rank 1 as the root cause with its own
// reason, which is the job's, and marks every other rank collateral.
func TestDistributedFirstFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode, reason string
		exit         func(r map[string]any) string // "" when rank 1's exit is as wanted
		limit        bool
	}{
		{mode: "exc", reason: "cuda_oom", exit: rankExits(1)},
		{mode: "oom", reason: "host_oom_killed", exit: rankSignal("SIGKILL"), limit: true},
		{mode: "segv", reason: "segfault", exit: rankSignal("SIGSEGV")},
	}
	for _, launcher := range []string{"spawn", "launch"} {
		for _, tt := range tests {
			t.Run(launcher+"/"+tt.mode, func(t *testing.T) {
				t.Parallel()
				if tt.limit {
					testbin.NeedRoot(t, "a memory limit makes a cgroup")
				}
				if launcher == "launch" && tt.mode != "exc" {
					// rank 1's signal: its launcher reaps it at once, so only a
					// pidfd keeps its status for vramguard
					requireKernel(t, 6, 15, "PIDFD_INFO_EXIT, the exit status of a process another parent reaped")
				}
				e := newEnv(t)
				args := []string{"run", "--name", "dist", "--sample-interval", "250ms", "--probe-hz", "5"}
				if tt.limit {
					// three ranks with torch imported hold about 0.8 GiB
					args = append(args, "--memory-limit", "2g")
				}
				args = append(args, "--", python, job("distributed.py"), launcher, tt.mode, fmt.Sprint(testbin.FreePort(t)))
				r := e.run(args...)
				if r.code == 0 {
					t.Fatalf("the job succeeded:\n%s", tail(r.stderr, 3000))
				}
				doc := e.explain("last")
				if doc["reason"] != tt.reason {
					t.Errorf("job reason %v, want %s (the root cause's)", doc["reason"], tt.reason)
				}
				root, _ := doc["root_cause"].(map[string]any)
				if root == nil || root["rank"] != 1.0 || root["reason"] != tt.reason || root["node"] == "" {
					t.Fatalf("root_cause %v, want rank 1 %s\n%s", doc["root_cause"], tt.reason, tail(r.stderr, 3000))
				}
				ranks := rankList(t, doc)
				for n, rk := range ranks {
					if rk["pid"].(float64) <= 0 || rk["world_size"] != 3.0 || rk["node"] == "" {
						t.Errorf("rank %d: pid %v world_size %v node %v", n, rk["pid"], rk["world_size"], rk["node"])
					}
					if peak, _ := rk["peak_host_bytes"].(float64); peak < 50<<20 {
						t.Errorf("rank %d: peak_host_bytes %v, less than a process with torch imported holds", n, rk["peak_host_bytes"])
					}
					if _, ok := rk["optimizer_steps"].(float64); !ok {
						t.Errorf("rank %d: no optimizer_steps from its probe: %v", n, rk["optimizer_steps"])
					}
					if n == 1 {
						if rk["reason"] != tt.reason || rk["collateral"] != false {
							t.Errorf("rank 1: reason %v collateral %v", rk["reason"], rk["collateral"])
						}
						if why := tt.exit(rk); why != "" {
							t.Errorf("rank 1: %s", why)
						}
						continue
					}
					ev := strings.Join(strs(rk["evidence"]), "\n")
					if rk["reason"] != "peer_failed" || rk["collateral"] != true || !strings.Contains(ev, "rank 1") {
						t.Errorf("rank %d: reason %v collateral %v, want peer_failed naming rank 1:\n%s", n, rk["reason"], rk["collateral"], ev)
					}
				}
				if launcher == "launch" && tt.mode == "exc" {
					if l, _ := ranks[1]["last_line"].(string); !strings.Contains(l, "CUDA out of memory") {
						t.Errorf("rank 1's last line %q", l)
					}
					if l, _ := ranks[0]["last_line"].(string); !strings.Contains(l, "Connection closed by peer") && !strings.Contains(l, "Connection reset by peer") {
						t.Errorf("rank 0's last line %q, want its gloo error", l)
					}
				}
				out := e.run("explain", "last").stdout
				if !strings.Contains(out, "ranks (3 ranks; rank 1 first to fail)") || !strings.Contains(out, "peer_failed") {
					t.Errorf("explain's text has no ranks table:\n%s", out)
				}
				if !strings.Contains(r.stderr, "rank 1 (pid ") || !strings.Contains(r.stderr, "failed first") {
					t.Errorf("the post-mortem on the terminal does not name rank 1:\n%s", tail(r.stderr, 3000))
				}
			})
		}
	}
}

// TestDistributedStall: rank 1 stops stepping while the others wait for it
// in an all_reduce. The job is stalled, rank 1 is named, and every rank's
// Python stacks are kept in the run directory.
func TestDistributedStall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.run("run", "--stall-timeout", "5s", "--sample-interval", "250ms", "--probe-hz", "5", "--",
		python, job("distributed.py"), "launch", "stall", fmt.Sprint(testbin.FreePort(t)))
	doc := e.explain("last")
	if doc["reason"] != "stalled" || r.code != 137 {
		t.Fatalf("reason %v exit %d, want stalled 137\n%s", doc["reason"], r.code, tail(r.stderr, 3000))
	}
	root, _ := doc["root_cause"].(map[string]any)
	if root == nil || root["rank"] != 1.0 || root["reason"] != "stalled" {
		t.Fatalf("root_cause %v, want rank 1 stalled", doc["root_cause"])
	}
	if ev := strings.Join(strs(doc["evidence"]), "\n"); !strings.Contains(ev, "rank 1 (pid ") || !strings.Contains(ev, "stopped making progress") {
		t.Errorf("the evidence does not name rank 1:\n%s", ev)
	}
	for n, rk := range rankList(t, doc) {
		path, _ := rk["stacks_path"].(string)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("rank %d: its stacks are not kept: %v", n, err)
			continue
		}
		steps, _ := rk["optimizer_steps"].(float64)
		if n == 1 {
			if !strings.Contains(string(b), "wait_for_the_next_batch") || rk["reason"] != "stalled" || steps != 5 {
				t.Errorf("rank 1: reason %v, %v steps, stacks:\n%s", rk["reason"], rk["optimizer_steps"], b)
			}
			continue
		}
		if !strings.Contains(string(b), "all_reduce") || rk["reason"] != "peer_failed" || rk["collateral"] != true || steps != 6 {
			t.Errorf("rank %d: reason %v collateral %v, %v steps, stacks:\n%s", n, rk["reason"], rk["collateral"], rk["optimizer_steps"], b)
		}
	}
}

// requireKernel fails (never skips) on a kernel older than major.minor.
func requireKernel(t *testing.T, major, minor int, what string) {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	rel := unix.ByteSliceToString(u.Release[:])
	var ma, mi int
	if _, err := fmt.Sscanf(rel, "%d.%d", &ma, &mi); err != nil || ma < major || (ma == major && mi < minor) {
		t.Fatalf("this test needs Linux %d.%d or later (%s); this kernel is %s", major, minor, what, rel)
	}
}

// rankList returns explain --json's ranks by rank, checking there are 3.
func rankList(t *testing.T, doc map[string]any) map[int]map[string]any {
	t.Helper()
	list, _ := doc["ranks"].([]any)
	out := map[int]map[string]any{}
	for _, x := range list {
		rk := x.(map[string]any)
		out[int(rk["rank"].(float64))] = rk
	}
	if len(out) != 3 {
		t.Fatalf("ranks: %v, want 0 to 2", doc["ranks"])
	}
	return out
}

func rankExits(c int) func(map[string]any) string {
	return func(r map[string]any) string {
		if r["exit_code"] != float64(c) || r["signal"] != nil {
			return fmt.Sprintf("exit_code %v signal %v, want %d", r["exit_code"], r["signal"], c)
		}
		return ""
	}
}

func rankSignal(name string) func(map[string]any) string {
	return func(r map[string]any) string {
		if r["signal"] != name {
			return fmt.Sprintf("signal %v, want %s", r["signal"], name)
		}
		return ""
	}
}
