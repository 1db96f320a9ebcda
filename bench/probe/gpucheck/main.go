// Command gpucheck runs vramguard's probe against a real CUDA job and checks
// what it reported: allocator samples against torch's own numbers, optimizer
// steps, the OOM observer with its snapshot (read back in Go), a checkpoint
// event, and CUDA left uninitialised in forked DataLoader workers. It prints
// a Markdown table and exits 1 when a check fails. Needs a GPU and a CUDA
// torch:
//
//	go run ./bench/probe/gpucheck -python python3
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vramguard/vramguard/bench/probe/probetmp"
	"github.com/vramguard/vramguard/internal/probe"
)

type report struct {
	Torch            string `json:"torch"`
	CUDABeforeLoader bool   `json:"cuda_before_loader"`
	CUDAAfterLoader  bool   `json:"cuda_after_loader"`
	WorkerCUDA       bool   `json:"worker_cuda_initialized"`
	Steps            int64  `json:"steps"`
	BigLine          int64  `json:"big_line"`
	Script           string `json:"script"`
	AllocatedBytes   int64  `json:"allocated_bytes"`
	ReservedBytes    int64  `json:"reserved_bytes"`
	TotalBytes       int64  `json:"total_bytes"`
	HasRequested     bool   `json:"has_requested"`
	OOM              bool   `json:"oom"`
	CkptBytes        int64  `json:"ckpt_bytes"`
}

func main() {
	python := flag.String("python", "python3", "interpreter with a CUDA torch")
	flag.Parse()
	ok, err := check(*python)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func check(python string) (bool, error) {
	tmp, dir, remove, err := probetmp.Install("vggpu-")
	if err != nil {
		return false, err
	}
	defer remove()
	l, err := probe.Listen(filepath.Join(tmp, "p.sock"))
	if err != nil {
		return false, err
	}
	runDir := filepath.Join(tmp, "run")
	if err := os.Mkdir(runDir, 0o755); err != nil {
		return false, err
	}
	script, err := filepath.Abs("bench/probe/gpucheck/gpu_job.py")
	if err != nil {
		return false, err
	}
	cmd := exec.Command(python, script, runDir)
	cmd.Env = probe.Env(os.Environ(), dir, probe.Options{Socket: l.Path(), Hz: 20, RunDir: runDir, OOMSnapshot: true})
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return false, fmt.Errorf("job: %v\n%s", err, errb.String())
	}
	var rep report
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
		return false, fmt.Errorf("job report: %v: %q", err, out.String())
	}
	// Read until the job's own connection has closed (its workers closed
	// theirs before it exited).
	var msgs []probe.Message
	deadline := time.After(20 * time.Second)
	pid := cmd.Process.Pid
wait:
	for {
		select {
		case m := <-l.Messages():
			msgs = append(msgs, m)
			if m.Type == probe.TypeDisconnect && m.PID == pid {
				break wait
			}
		case <-deadline:
			return false, fmt.Errorf("no disconnect from the job after 20 s")
		}
	}
	l.Close()

	var sum probe.Summary
	var torchMsg, oom *probe.Message
	var cudaSamples []probe.DeviceStats
	forked := 0
	for i := range msgs {
		m := msgs[i]
		sum.Add(m)
		switch {
		case m.Type == probe.TypeTorch && m.PID == pid:
			torchMsg = &msgs[i]
		case m.Type == probe.TypeOOM && oom == nil:
			oom = &msgs[i]
		case m.Type == probe.TypeSample && m.PID == pid && len(m.CUDA) > 0:
			cudaSamples = append(cudaSamples, m.CUDA[0])
		case m.Type == probe.TypeHello && m.Forked:
			forked++
		}
	}
	all := true
	fmt.Printf("probe GPU check: torch %s, %s\n\n| check | result | seen |\n| --- | --- | --- |\n", rep.Torch, time.Now().UTC().Format("2006-01-02"))
	row := func(name string, pass bool, seen string, a ...any) {
		all = all && pass
		res := "PASS"
		if !pass {
			res = "FAIL"
		}
		fmt.Printf("| %s | %s | %s |\n", name, res, fmt.Sprintf(seen, a...))
	}
	row("CUDA not initialised by the probe before the job touches it", !rep.CUDABeforeLoader && !rep.CUDAAfterLoader, "before loader %v, after %v", rep.CUDABeforeLoader, rep.CUDAAfterLoader)
	row("forked DataLoader workers probed, CUDA uninitialised in them", forked == 2 && !rep.WorkerCUDA, "%d forked hellos, worker is_initialized %v", forked, rep.WorkerCUDA)
	hook := ""
	if torchMsg != nil {
		hook = torchMsg.StepHook
	}
	row("optimizer steps counted", sum.OptimizerSteps == rep.Steps && hook != "", "%d of %d (hook %q)", sum.OptimizerSteps, rep.Steps, hook)
	var last probe.DeviceStats
	near := false
	for _, d := range cudaSamples {
		last = d
		// The job held still while the probe sampled: one sample must show
		// exactly what memory_stats said in the job.
		if d.AllocatedBytes == rep.AllocatedBytes && d.ReservedBytes == rep.ReservedBytes {
			near = true
		}
	}
	row("CUDA samples match torch.cuda.memory_stats in the job", len(cudaSamples) > 0 && near,
		"%d samples; job allocated %d reserved %d; last sample allocated %d reserved %d", len(cudaSamples), rep.AllocatedBytes, rep.ReservedBytes, last.AllocatedBytes, last.ReservedBytes)
	tot := int64(0)
	if last.TotalBytes != nil {
		tot = *last.TotalBytes
	}
	row("mem_get_info total matches", tot == rep.TotalBytes, "%d vs %d", tot, rep.TotalBytes)
	row("requested_bytes present when torch has it", (last.RequestedBytes != nil) == rep.HasRequested, "torch has it: %v, sample has it: %v", rep.HasRequested, last.RequestedBytes != nil)
	row("the job hit a real CUDA OOM", rep.OOM, "%v", rep.OOM)
	if oom == nil {
		row("OOM event from the observer", false, "none (expected on torch >= 2.0; torch 1.x reports only uncaught OOMs)")
	} else {
		row("OOM event from the observer", oom.Source == "observer", "source %s, device %v, alloc %v", oom.Source, deref(oom.Device), deref(oom.AllocBytes))
		_, serr := os.Stat(oom.SummaryPath)
		row("memory_summary written", serr == nil, "%s", oom.SummaryPath)
		sites, err := probe.TopAllocationSites(oom.SnapshotPath, 3)
		top := "-"
		if len(sites) > 0 {
			top = fmt.Sprintf("%s:%d %d bytes", sites[0].File, sites[0].Line, sites[0].Bytes)
		}
		row("snapshot parsed in Go; top site is the 4 GiB tensor's line", err == nil && len(sites) > 0 && sites[0].File == rep.Script && sites[0].Line == rep.BigLine,
			"top %s (want %s:%d) %v", top, rep.Script, rep.BigLine, err)
	}
	ck := int64(-1)
	if len(sum.Checkpoints) == 1 {
		ck = sum.Checkpoints[0].Bytes
	}
	row("checkpoint event", ck == rep.CkptBytes, "%d bytes, file %d", ck, rep.CkptBytes)
	if sum.PeakAllocatedBytes != nil && sum.PeakReservedBytes != nil {
		fmt.Printf("\nsummary: %d samples, peak allocated %d, peak reserved %d, retries %d, ooms %d\n", sum.Samples, *sum.PeakAllocatedBytes, *sum.PeakReservedBytes, sum.NumAllocRetries, sum.NumOOMs)
	}
	if errs := sum.Errors; len(errs) > 0 {
		all = false
		fmt.Printf("\nprobe errors: %v\n", errs)
	}
	return all, nil
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
