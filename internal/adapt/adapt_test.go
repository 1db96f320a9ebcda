package adapt

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/diagnose"
)

// oom parses a real PyTorch message, so the policy is tested on what the
// classifier gives it.
func oom(t *testing.T, msg string) *diagnose.OOM {
	t.Helper()
	o, ok := diagnose.ParseOOM(msg)
	if !ok {
		t.Fatalf("not an OOM message: %s", msg)
	}
	return &o
}

func TestDecide(t *testing.T) {
	// torch 2.x: 2 GiB asked, 1.5 GiB free, 75 GiB allocated: had 99% of need.
	plain := "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.60 GiB memory in use. Of the allocated memory 75.00 GiB is allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but unallocated."
	// 40 GiB asked with 1.5 free and 10 allocated: had 11.5/50 = 23%.
	huge := "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 40.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.60 GiB memory in use. Of the allocated memory 10.00 GiB is allocated by PyTorch, and 0.50 GiB is reserved by PyTorch but unallocated."
	// reserved-but-unallocated (3.1 GiB) holds the 2 GiB request: fragmentation.
	frag := "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.60 GiB memory in use. Of the allocated memory 73.00 GiB is allocated by PyTorch, and 3.10 GiB is reserved by PyTorch but unallocated."
	base := Settings{Batch: 64, Accum: 1, Workers: 8}
	cases := []struct {
		name      string
		cur       Settings
		reason    string
		msg       string
		torch     string
		want      Settings
		line      string // Step.String(), "" for no step
		exhausted bool
	}{
		{"oom halves batch, doubles accum", base, diagnose.CUDAOOM, plain, "2.4.0",
			Settings{32, 2, 8, ""}, "attempt 2 after cuda_oom: batch 64→32, accum 1→2", false},
		{"oom numbers cut further", base, diagnose.CUDAOOM, huge, "2.4.0",
			Settings{8, 8, 8, ""}, "attempt 2 after cuda_oom: batch 64→8, accum 1→8", false},
		{"oom without numbers halves", Settings{Batch: 10, Accum: 3, Workers: Unset}, diagnose.CUDAOOM, "", "",
			Settings{5, 6, Unset, ""}, "attempt 2 after cuda_oom: batch 10→5, accum 3→6", false},
		{"odd batch keeps effective batch as close as it can", Settings{Batch: 7, Accum: 1, Workers: Unset}, diagnose.CUDAOOM, "", "",
			Settings{3, 3, Unset, ""}, "attempt 2 after cuda_oom: batch 7→3, accum 1→3", false},
		{"fragmentation on torch 2.1+: expandable segments, same batch", base, diagnose.CUDAOOM, frag, "2.1.0+cu121",
			Settings{64, 1, 8, "expandable_segments:True"}, "attempt 2 after cuda_oom: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", false},
		{"fragmentation on torch 1.13: max_split_size_mb from the request", base, diagnose.CUDAOOM, frag, "1.13.1",
			Settings{64, 1, 8, "max_split_size_mb:2048"}, "attempt 2 after cuda_oom: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:2048", false},
		{"fragmentation again after the setting: the batch", Settings{64, 1, 8, "expandable_segments:True"}, diagnose.CUDAOOM, frag, "2.4.0",
			Settings{32, 2, 8, "expandable_segments:True"}, "attempt 2 after cuda_oom: batch 64→32, accum 1→2", false},
		{"at min batch: exhausted", Settings{Batch: 1, Accum: 64, Workers: Unset}, diagnose.CUDAOOM, plain, "",
			Settings{1, 64, Unset, ""}, "", true},
		{"no --batch: exhausted", Settings{Batch: Unset, Accum: Unset, Workers: 4}, diagnose.CUDAOOM, plain, "",
			Settings{Unset, Unset, 4, ""}, "", true},
		{"shm: fewer workers", base, diagnose.ShmExhausted, "", "",
			Settings{64, 1, 4, ""}, "attempt 2 after shm_exhausted: workers 8→4", false},
		{"worker died: fewer workers", Settings{64, 1, 1, ""}, diagnose.DataloaderDied, "", "",
			Settings{64, 1, 0, ""}, "attempt 2 after dataloader_worker_died: workers 1→0", false},
		{"shm at 0 workers: exhausted", Settings{64, 1, 0, ""}, diagnose.ShmExhausted, "", "",
			Settings{64, 1, 0, ""}, "", true},
		{"host OOM: workers first", base, diagnose.HostOOMKilled, "", "",
			Settings{64, 1, 4, ""}, "attempt 2 after host_oom_killed: workers 8→4", false},
		{"host OOM at 0 workers: the batch", Settings{64, 1, 0, ""}, diagnose.HostOOMKilled, "", "",
			Settings{32, 2, 0, ""}, "attempt 2 after host_oom_killed: batch 64→32, accum 1→2", false},
		{"another reason: settings kept", base, diagnose.Segfault, "", "",
			base, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := diagnose.Verdict{Reason: c.reason}
			if c.msg != "" {
				v.OOM = oom(t, c.msg)
			}
			d := Policy{MinBatch: 1}.Decide(c.cur, Ended{Attempt: 1, Verdict: v, Torch: c.torch})
			if d.Next != c.want {
				t.Errorf("next = %+v, want %+v", d.Next, c.want)
			}
			line := ""
			if d.Step != nil {
				line = d.Step.String()
				if d.Step.Why == "" {
					t.Error("a step without its why")
				}
			}
			if line != c.line {
				t.Errorf("step = %q, want %q", line, c.line)
			}
			if d.Exhausted != c.exhausted || c.exhausted && d.Note == "" {
				t.Errorf("exhausted = %v (note %q), want %v", d.Exhausted, d.Note, c.exhausted)
			}
		})
	}
}

func TestMinBatchFloor(t *testing.T) {
	d := Policy{MinBatch: 24}.Decide(Settings{Batch: 32, Accum: 1, Workers: Unset}, Ended{Attempt: 3, Verdict: diagnose.Verdict{Reason: diagnose.CUDAOOM}})
	if d.Next.Batch != 24 || d.Next.Accum != 2 || !strings.Contains(d.Step.Why, "effective batch is 48 instead of 32") {
		t.Errorf("next %+v, why %q", d.Next, d.Step.Why)
	}
}

func TestNoEffect(t *testing.T) {
	same := "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.50 GiB is free. Of the allocated memory 75.00 GiB is allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but unallocated."
	less := strings.Replace(same, "Tried to allocate 2.00 GiB", "Tried to allocate 1.00 GiB", 1)
	batch := &Step{Attempt: 2, AfterReason: diagnose.CUDAOOM, Changes: map[string][2]any{"batch": {64, 32}}}
	prev := Ended{Verdict: diagnose.Verdict{Reason: diagnose.CUDAOOM, OOM: oom(t, same)}}
	if got := NoEffect(prev, Ended{Verdict: diagnose.Verdict{Reason: diagnose.CUDAOOM, OOM: oom(t, same)}}, batch); !strings.Contains(got, "no effect") || !strings.Contains(got, "{batch}") {
		t.Errorf("same request after the batch halved: %q", got)
	}
	if got := NoEffect(prev, Ended{Verdict: diagnose.Verdict{Reason: diagnose.CUDAOOM, OOM: oom(t, less)}}, batch); got != "" {
		t.Errorf("a smaller request is an effect: %q", got)
	}
	workers := &Step{Changes: map[string][2]any{"workers": {4, 2}}}
	shm := diagnose.Verdict{Reason: diagnose.ShmExhausted}
	if got := NoEffect(Ended{Verdict: shm, Processes: 5}, Ended{Verdict: shm, Processes: 5}, workers); !strings.Contains(got, "{workers}") {
		t.Errorf("as many processes after workers 4→2: %q", got)
	}
	if got := NoEffect(Ended{Verdict: shm, Processes: 5}, Ended{Verdict: shm, Processes: 3}, workers); got != "" {
		t.Errorf("fewer processes is an effect: %q", got)
	}
}

func TestSettingsJSONAndEnv(t *testing.T) {
	s := Settings{Batch: 16, Accum: 4, Workers: Unset, AllocConf: "expandable_segments:True"}
	b, _ := json.Marshal(s)
	if string(b) != `{"accum":4,"alloc_conf":"expandable_segments:True","batch":16}` {
		t.Errorf("json %s", b)
	}
	var back Settings
	if err := json.Unmarshal(b, &back); err != nil || back != s {
		t.Errorf("round trip %+v, %v", back, err)
	}
	env := s.Env("garbage_collection_threshold:0.6,expandable_segments:False")
	if env["PYTORCH_CUDA_ALLOC_CONF"] != "garbage_collection_threshold:0.6,expandable_segments:True" || env["VRAMGUARD_BATCH"] != "16" || env["VRAMGUARD_ACCUM"] != "4" {
		t.Errorf("env %v", env)
	}
	if _, ok := env["VRAMGUARD_WORKERS"]; ok {
		t.Error("an unmanaged setting in the environment")
	}
	if got := s.String(); got != "batch 16, accum 4, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" {
		t.Errorf("String %q", got)
	}
}

func TestAtLeast(t *testing.T) {
	for v, want := range map[string]bool{"2.1.0": true, "2.10.0+cu126": true, "3.0": true, "2.0.1": false, "1.13.1+cu117": false, "": false, "dev": false, "2.1a0": true} {
		if AtLeast(v, 2, 1) != want {
			t.Errorf("AtLeast(%q, 2, 1) = %v", v, !want)
		}
	}
}
