package probe

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The notebook side (vramguard/notebook.py and the modules it loads) in a
// bare IPython InteractiveShell running cells as a kernel does
// (testdata/scripts/notebook_shell.py), with real torch on the CPU and, for
// the CUDA paths, the scripted allocator (testdata/fakecuda/scripted.py).
// Every figure the magics print is held against a measure of its own: the
// process's VmRSS read by the driver around each cell, sizes computed from
// the tensors, the allocator's own counters.

func TestNotebookCPU(t *testing.T) {
	t.Parallel()
	f, msgs, pid := runNotebook(t, "cpu")
	x := f.cell("x = torch.ones")
	y := f.cell("y = torch.ones")

	t.Run("line after a cell", func(t *testing.T) {
		m := lineRE.FindStringSubmatch(x.Stderr)
		if m == nil || m[1] != strconv.Itoa(x.N) {
			t.Fatalf("cell %d stderr %q: no vramguard line", x.N, x.Stderr)
		}
		if d := parseSize(t, m[5]); !near(d, x.RSSAfter-x.RSSBefore, 2*mib) || !near(d, 96*mib, 4*mib) {
			t.Errorf("host %s; VmRSS moved %d bytes, the tensor is %d", m[5], x.RSSAfter-x.RSSBefore, 96*mib)
		}
		if m[2] != "" {
			t.Errorf("a GPU figure without CUDA: %q", x.Stderr)
		}
		if c := f.cell("del y"); strings.Contains(c.Stderr, "vramguard:") {
			t.Errorf("del y (Out keeps it) printed %q", c.Stderr)
		}
		raised := f.cell("def f():")
		if m := lineRE.FindStringSubmatch(raised.Stderr); m == nil || m[8] != "ZeroDivisionError" {
			t.Errorf("raising cell: %q", raised.Stderr)
		}
		if strings.Contains(f.Quiet.Stderr, "vramguard:") {
			t.Errorf("quiet printed %q", f.Quiet.Stderr)
		}
		if !lineRE.MatchString(f.Verbose.Stderr) {
			t.Errorf("verbose printed nothing after 1 + 1: %q", f.Verbose.Stderr)
		}
		if strings.Contains(f.Threshold.Stderr, "vramguard:") {
			t.Errorf("threshold 1GiB: a 96 MiB cell printed %q", f.Threshold.Stderr)
		}
	})

	t.Run("who", func(t *testing.T) {
		w := f.Who
		if w == nil {
			t.Fatalf("who --json printed nothing: %+v", f.cell("%vramguard who --json"))
		}
		cases := []struct {
			path, holder string
			bytes        int64
		}{
			{"x", "x", f.Sizes["x"]},
			{fmt.Sprintf("Out[%d]", y.N), fmt.Sprintf("Out[%d]", y.N), 32 * mib},
			{fmt.Sprintf("sys.last_traceback: f() in In[%d], t", f.cell("def f():").N), "last exception", 40 * mib},
			{"model[0].weight", "model", 64 * 64 * 4},
			{"model[0].weight.grad", "model", 64 * 64 * 4},
			{"opt.state[model[0].weight]['exp_avg']", "opt", 64 * 64 * 4},
			{"get.<closure buf>", "get", 1 << 20},
			{"model._forward_hooks[0].<closure kept>", "model", 3 << 19},
		}
		for _, c := range cases {
			got, holder, ok := w.find(c.path)
			if !ok {
				t.Errorf("%s not in who:\n%s", c.path, f.WhoText)
				continue
			}
			if holder != c.holder || got.Bytes != c.bytes || got.Device != "cpu" {
				t.Errorf("%s: held by %q, %d bytes on %s; want %q, %d on cpu", c.path, holder, got.Bytes, got.Device, c.holder, c.bytes)
			}
		}
		// v = x[::2] shares x's storage: counted once, as x's.
		if _, _, ok := w.find("v"); ok {
			t.Errorf("the view v is counted as a storage of its own:\n%s", f.WhoText)
		}
		if got, _, _ := w.find("x"); len(got.Also) == 0 || got.Also[0] != "v" {
			t.Errorf("x's storage does not say v holds it too: %+v", got)
		}
		if !strings.Contains(f.WhoText, "HOLDER") || !strings.Contains(f.WhoText, "last exception") {
			t.Errorf("who's table:\n%s", f.WhoText)
		}
	})

	t.Run("free", func(t *testing.T) {
		_, _, outFreed := f.Free.step("out")
		_, _, tbFreed := f.Free.step("tb")
		if !near(outFreed, 32*mib, 2*mib) || !near(tbFreed, 40*mib, 2*mib) {
			t.Errorf("free: out step freed %d, tb step %d; the tensors are %d and %d", outFreed, tbFreed, 32*mib, 40*mib)
		}
		if !near(f.FreeRSSDrop, 72*mib, 3*mib) {
			t.Errorf("VmRSS dropped %d over free, want about %d", f.FreeRSSDrop, 72*mib)
		}
		if f.XSumAfterFree != 96*mib {
			t.Errorf("x after free sums to %d, want %d", f.XSumAfterFree, 96*mib)
		}
		a := f.WhoAfter
		if a == nil || a.group(fmt.Sprintf("Out[%d]", y.N)) || a.group("last exception") || !a.group("x") || !a.group("model") {
			t.Errorf("who after free: %+v", a)
		}
	})

	t.Run("cells", func(t *testing.T) {
		cs := f.CellsJSON.Cells
		if len(cs) < 10 {
			t.Fatalf("cells --json: %d cells", len(cs))
		}
		for i := 1; i < len(cs); i++ {
			if cs[i].Delta > cs[i-1].Delta {
				t.Errorf("cells not sorted by growth: %+v before %+v", cs[i-1], cs[i])
			}
		}
		text := f.cell("%vramguard cells").Stdout
		if !strings.Contains(text, "FIRST LINE") || !strings.Contains(text, "x = torch.ones(96 << 20, dtype=torch.uint8)") {
			t.Errorf("cells:\n%s", text)
		}
	})

	t.Run("status and errors", func(t *testing.T) {
		for _, want := range []string{"kernel PID " + strconv.Itoa(pid), "probe: sending to ", "devices: CUDA not initialised",
			"host: kernel RSS", "autosave off", "%vramguard who"} {
			if !strings.Contains(f.Status.Stdout, want) {
				t.Errorf("status lacks %q:\n%s", want, f.Status.Stdout)
			}
		}
		if !strings.Contains(f.Help.Stdout, "%vramguard [SUBCOMMAND]") {
			t.Errorf("--help: %q", f.Help.Stdout)
		}
		for flag, want := range map[string]string{"--out": "out", "--tb": "tb", "--cache": "gc empty_cache"} {
			if got := strings.Join(f.FreeSteps[flag], " "); got != want {
				t.Errorf("free %s ran %q, want %q", flag, got, want)
			}
		}
		if !strings.Contains(f.Pinfo.Stdout, "%vramguard [SUBCOMMAND]") {
			t.Errorf("%%vramguard?: %q", f.Pinfo.Stdout)
		}
		if f.AfterUnload.Callbacks != 0 || f.AfterUnload.Magic || f.AfterUnload.Wrapped {
			t.Errorf("after %%unload_ext: %+v", f.AfterUnload)
		}
		for _, e := range f.Errors {
			out := e.Stdout + e.Stderr
			if e.OK || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.HasPrefix(out, "UsageError: ") || strings.Contains(out, "Traceback") {
				t.Errorf("%s: want one UsageError line, got %q", e.Src, out)
			}
		}
	})

	t.Run("shutdown request", func(t *testing.T) {
		// The kernel's do_shutdown (ipykernel's shutdown_request calls it)
		// still answers, and the supervisor hears of the request.
		if f.DoShutdown["status"] != "ok" || f.DoShutdown["restart"] != true {
			t.Errorf("do_shutdown(True) returned %v", f.DoShutdown)
		}
		sd := rawOfType(msgs, TypeKernelShutdown)
		if len(sd) != 1 || sd[0]["restart"] != true || sd[0]["pid"] != float64(pid) {
			t.Errorf("kernel_shutdown messages: %v", sd)
		}
	})

	t.Run("messages", func(t *testing.T) {
		// The first cell loads the extension (its start came before the
		// tracker); the last unloads it (its end comes after).
		ran := f.Cells[1 : len(f.Cells)-1]
		starts, ends := rawOfType(msgs, "cell_start"), rawOfType(msgs, "cell")
		if len(starts) != len(ran)+1 || len(ends) != len(ran) {
			t.Fatalf("%d cells ran after the extension loaded; %d cell_start and %d cell messages", len(ran), len(starts), len(ends))
		}
		for i, c := range ran {
			s, e := starts[i], ends[i]
			if s["pid"] != float64(pid) || e["pid"] != float64(pid) {
				t.Errorf("cell %d: pid %v / %v, want %d", c.N, s["pid"], e["pid"], pid)
			}
			if int(s["execution_count"].(float64)) != c.N || int(e["execution_count"].(float64)) != c.N {
				t.Errorf("cell %d: messages %v / %v", c.N, s, e)
			}
			if _, ok := e["cuda"]; ok {
				t.Errorf("cell %d: cuda without CUDA: %v", c.N, e)
			}
			if c.Src == x.Src && !near(int64(e["rss_delta"].(float64)), x.RSSAfter-x.RSSBefore, 2*mib) {
				t.Errorf("cell %d: rss_delta %v, VmRSS moved %d", c.N, e["rss_delta"], x.RSSAfter-x.RSSBefore)
			}
			if strings.HasPrefix(c.Src, "def f():") && e["error"] != "ZeroDivisionError" {
				t.Errorf("raising cell: %v", e)
			}
			if fl := s["first_line"]; fl != strings.Split(c.Src, "\n")[0] {
				t.Errorf("cell %d first_line %q", c.N, fl)
			}
		}
	})
}

// Without torch: host figures only, the host peak exact (VmHWM) and from the
// sampler where clear_refs is not there, and torch never imported.
func TestNotebookNoTorch(t *testing.T) {
	t.Parallel()
	for _, scenario := range []string{"notorch", "sampler"} {
		t.Run(scenario, func(t *testing.T) {
			t.Parallel()
			f, _, _ := runNotebook(t, scenario)
			if f.TorchImported {
				t.Error("the notebook side imported torch")
			}
			keep := f.cell("keep = ")
			m := lineRE.FindStringSubmatch(keep.Stderr)
			if m == nil || !near(parseSize(t, m[5]), 100*mib, 3*mib) {
				t.Errorf("keep cell: %q (VmRSS moved %d)", keep.Stderr, keep.RSSAfter-keep.RSSBefore)
			}
			tmp := f.cell("tmp = ")
			m = lineRE.FindStringSubmatch(tmp.Stderr)
			if m == nil {
				t.Fatalf("a cell that peaked at +200 MiB printed %q", tmp.Stderr)
			}
			// The peak is the 200 MiB string; the sampler may miss the
			// last few milliseconds of it.
			lo := int64(200 * mib)
			if scenario == "sampler" {
				lo = 150 * mib
			}
			if d, p := parseSize(t, m[5]), parseSize(t, m[6]); !near(d, 0, 3*mib) || p < lo || p > 206*mib {
				t.Errorf("host %s (peak %s): want about +0 with a peak of 200 MiB", m[5], m[6])
			}
			if !strings.Contains(f.WhoCell.Stdout, "torch is not imported") || !strings.Contains(f.Status.Stdout, "torch not imported") {
				t.Errorf("who %q, status %q", f.WhoCell.Stdout, f.Status.Stdout)
			}
		})
	}
}

// The CUDA paths against the scripted allocator: per-cell figures and
// peaks, the notebook's own max_memory_allocated() kept across the resets,
// who's footer and free's steps.
func TestNotebookCUDA(t *testing.T) {
	t.Parallel()
	f, msgs, _ := runNotebook(t, "cuda")
	a := f.cell("a = scripted.tensor")
	m := lineRE.FindStringSubmatch(a.Stderr)
	if m == nil || parseSize(t, m[2]) != 8*mib || parseSize(t, m[3]) != 8*mib {
		t.Errorf("a = 8 MiB: %q", a.Stderr)
	}
	b := f.cell("b = scripted.tensor")
	if m = lineRE.FindStringSubmatch(b.Stderr); m == nil || parseSize(t, m[2]) != 0 || parseSize(t, m[3]) != 16*mib {
		t.Errorf("b = 16 MiB, deleted: %q", b.Stderr)
	}
	if f.UserPeak != f.TruePeak || f.TruePeak != 24*mib {
		t.Errorf("max_memory_allocated() %d after the per-cell resets; the allocator's peak without resets is %d", f.UserPeak, f.TruePeak)
	}
	if f.AfterReset != f.AllocatedAtReset {
		t.Errorf("after the notebook's own reset_peak_memory_stats(): %d, want %d", f.AfterReset, f.AllocatedAtReset)
	}
	var cellMsg map[string]any
	for _, v := range rawOfType(msgs, "cell") {
		if int(v["execution_count"].(float64)) == b.N {
			cellMsg = v
		}
	}
	rows, _ := cellMsg["cuda"].([]any)
	if len(rows) != 1 {
		t.Fatalf("cell message of b: %v", cellMsg)
	}
	row := rows[0].(map[string]any)
	if row["allocated_delta"] != 0.0 || row["allocated_peak_delta"] != float64(16*mib) || row["device"] != 0.0 {
		t.Errorf("cell message of b: %v", row)
	}

	w := f.Who
	if w == nil || len(w.CUDA) != 1 {
		t.Fatalf("who: %+v", w)
	}
	foot := w.CUDA[0]
	if foot.Allocated != f.BeforeFree.Allocated || foot.Named != 12*mib || foot.Unnamed != 3*mib ||
		foot.Cache != f.BeforeFree.Reserved-f.BeforeFree.Allocated {
		t.Errorf("footer %+v; allocator %+v, named 12 MiB (a, Out[c]), 3 MiB allocated by no tensor", foot, f.BeforeFree)
	}
	if got, _, ok := w.find("a"); !ok || got.Device != "cuda:0" || got.Cell != fmt.Sprintf("In[%d]:1", a.N) {
		t.Errorf("a: %+v", got)
	}
	if !strings.Contains(f.WhoText, "no Python name reaches 3 MiB") || !strings.Contains(f.WhoText, "empty_cache() returns it") {
		t.Errorf("who:\n%s", f.WhoText)
	}
	outA, _, _ := f.Free.step("out")
	_, ecR, _ := f.Free.step("empty_cache")
	if outA != 4*mib || ecR != f.BeforeFree.Reserved-f.AfterFree.Reserved || f.AfterFree.EmptyCaches != 1 || ecR <= 0 {
		t.Errorf("free: out freed %d allocated (Out[c] is 4 MiB), empty_cache %d reserved (allocator %d -> %d, %d calls)",
			outA, ecR, f.BeforeFree.Reserved, f.AfterFree.Reserved, f.AfterFree.EmptyCaches)
	}
	if !strings.Contains(f.Status.Stdout, "cuda:0: allocated ") {
		t.Errorf("status: %s", f.Status.Stdout)
	}
}

// Autosave at the optimizer steps of a long cell and after cells, keep N,
// weights_only loading, restore into the live objects, and the warnings.
func TestNotebookAutosave(t *testing.T) {
	t.Parallel()
	f, msgs, pid := runNotebook(t, "autosave")
	if !strings.Contains(f.Enable.Stdout, "autosave model opt sched every 0s") && !strings.Contains(f.Enable.Stdout, "autosave model opt sched every") {
		t.Errorf("enable: %q %q", f.Enable.Stdout, f.Enable.Stderr)
	}
	if f.InCellSaves < 3 {
		t.Errorf("%d autosaves during a cell that trained for longer than three periods", f.InCellSaves)
	}
	if len(f.Files) != 2 {
		t.Errorf("--keep 2 left %v", f.Files)
	}
	for _, name := range f.Files {
		if !regexp.MustCompile(`^autosave-\d{8}-\d{6}-\d+\.pt$`).MatchString(name) {
			t.Errorf("file name %q", name)
		}
	}
	if f.WeightsOnly.Format != 1 || strings.Join(f.WeightsOnly.Objects, ",") != "model" || !f.WeightsOnly.Equal {
		t.Errorf("torch.load(weights_only=True): %+v", f.WeightsOnly)
	}
	for k, v := range f.Same {
		if !v {
			t.Errorf("%s after restore differs from the autosaved state\n%s", k, f.Restore.Stdout)
		}
	}
	if len(f.Same) != 3 || !strings.Contains(f.Restore.Stdout, "opt: loaded into Adam") {
		t.Errorf("restore: %q %v", f.Restore.Stdout, f.Same)
	}
	if !strings.Contains(f.Tmpfs.Stderr, "is on tmpfs") {
		t.Errorf("no tmpfs warning: %q", f.Tmpfs.Stderr)
	}
	for _, c := range []nbCell{f.Unwritable, f.NoLast} {
		if c.OK || !strings.HasPrefix(c.Stderr, "UsageError: ") || strings.Count(strings.TrimSpace(c.Stderr), "\n") != 0 {
			t.Errorf("%s: %q", c.Src, c.Stderr)
		}
	}
	if !strings.Contains(f.StatusOff.Stdout, "autosave off") {
		t.Errorf("status after off: %q", f.StatusOff.Stdout)
	}
	n := 0
	for _, v := range rawOfType(msgs, TypeCkpt) {
		if v["autosave"] == true && v["pid"] == float64(pid) {
			n++
			objs, _ := v["objects"].([]any)
			if len(objs) == 0 || v["atomic"] != true {
				t.Errorf("autosave ckpt message: %v", v)
			}
		}
	}
	if n < 4 {
		t.Errorf("%d autosave ckpt messages", n)
	}
}

// VRAMGUARD_LAST_AUTOSAVE (set by run --kernel for the next kernel; set
// here by the driver before the extension loads): read once and removed
// from the environment, and `%vramguard restore` alone loads it.
func TestNotebookRestoreLast(t *testing.T) {
	t.Parallel()
	f, _, _ := runNotebook(t, "lastautosave")
	if f.EnvAfterLoad != nil {
		t.Errorf("VRAMGUARD_LAST_AUTOSAVE still set after the extension loaded: %q", *f.EnvAfterLoad)
	}
	if f.Last == "" || !strings.Contains(f.Restore.Stdout, "restored "+f.Last) || !strings.Contains(f.Status.Stdout, f.Last) {
		t.Errorf("restore %q; status %q", f.Restore.Stdout, f.Status.Stdout)
	}
	if len(f.Weight) != 32 || fmt.Sprint(f.Weight) != fmt.Sprint(f.SavedWeight) {
		t.Errorf("weights after restore %v, saved %v", f.Weight, f.SavedWeight)
	}
}

// The last exception raised in exec(src, globals, cfg), cfg the notebook's
// own dict: `%vramguard free --tb` clears the exception's frames and leaves
// cfg as it was.
func TestNotebookFreeKeepsExecLocals(t *testing.T) {
	t.Parallel()
	f, _, _ := runNotebook(t, "freeexec")
	if strings.Join(f.CfgKeys, ",") != "lr,t" {
		t.Errorf("cfg after free --tb holds %v, want lr and t", f.CfgKeys)
	}
	if len(f.Free.Steps) != 1 || f.Free.Steps[0].Step != "tb" || !strings.Contains(f.Free.Steps[0].What, "sys.last_traceback") {
		t.Errorf("free --tb: %+v", f.Free)
	}
}
