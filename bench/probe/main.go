// Command probe-bench measures what vramguard's in-process probe costs a CPU
// training loop: the same loop (train.py) without the probe and with it at
// 1 Hz and 20 Hz, interleaved round by round so drift on a shared machine
// hits every configuration alike. It prints a Markdown table of medians.
//
//	go run ./bench/probe -runs 9 -steps 300
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vramguard/vramguard/bench/probe/probetmp"
	"github.com/vramguard/vramguard/internal/probe"
)

type config struct {
	name  string
	hz    float64 // 0: no probe
	agent string  // "": no agent socket; "listening": a second listener, as under `vramguard serve`; "absent": a path nobody listens on
}

type run struct {
	loop, wall, cpu time.Duration
	samples         int
}

func main() {
	runs := flag.Int("runs", 9, "rounds; each runs every configuration once (0: skip the training loop)")
	pairs := flag.Int("pairs", 20, "in-process on/off block pairs per rate (0: skip)")
	steps := flag.Int("steps", 300, "optimizer steps per run")
	python := flag.String("python", "/usr/bin/python3", "interpreter with torch")
	agent := flag.Bool("agent", true, "also run the probe reporting to an agent socket too (listening, and absent)")
	flag.Parse()
	if err := bench(*runs, *steps, *pairs, *python, *agent); err != nil {
		fmt.Fprintln(os.Stderr, "probe-bench:", err)
		os.Exit(1)
	}
}

func bench(runs, steps, pairs int, python string, agent bool) error {
	tmp, dir, remove, err := probetmp.Install("vgbench-")
	if err != nil {
		return err
	}
	defer remove()
	l, err := probe.Listen(filepath.Join(tmp, "p.sock"))
	if err != nil {
		return err
	}
	defer l.Close()
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	samples := map[int]int{}
	gone := map[int]bool{}
	go func() {
		for m := range l.Messages() {
			mu.Lock()
			switch m.Type {
			case probe.TypeSample:
				samples[m.PID]++
			case probe.TypeDisconnect:
				gone[m.PID] = true
				cond.Broadcast()
			}
			mu.Unlock()
		}
	}()
	// samplesOf waits until pid's connection has closed and returns how many
	// samples it sent.
	samplesOf := func(pid int) int {
		mu.Lock()
		defer mu.Unlock()
		for !gone[pid] {
			cond.Wait()
		}
		return samples[pid]
	}
	script, err := filepath.Abs("bench/probe/train.py")
	if err != nil {
		return err
	}
	configs := []config{{"without probe", 0, ""}, {"probe 1 Hz", 1, ""}, {"probe 20 Hz", 20, ""}}
	agentSock, absentSock := filepath.Join(tmp, "agent.sock"), filepath.Join(tmp, "absent.sock")
	if agent {
		// the machine-wide agent's socket, which a supervised job's probe
		// also reports to (best effort): drained as the agent drains it
		al, err := probe.Listen(agentSock)
		if err != nil {
			return err
		}
		defer al.Close()
		go func() {
			for range al.Messages() {
			}
		}()
		configs = append(configs, config{"probe 1 Hz, agent listening", 1, "listening"},
			config{"probe 1 Hz, agent absent", 1, "absent"}, config{"probe 20 Hz, agent listening", 20, "listening"})
	}
	res := make([][]run, len(configs))
	base := []string{"PATH=/usr/bin:/bin", "HOME=" + tmp, "OMP_NUM_THREADS=1"}
	for r := range runs {
		for k := range configs {
			i := (k + r) % len(configs) // rotate the order every round
			c := configs[i]
			env := base
			if c.hz > 0 {
				o := probe.Options{Socket: l.Path(), Hz: c.hz}
				switch c.agent {
				case "listening":
					o.AgentSocket = agentSock
				case "absent":
					o.AgentSocket = absentSock
				}
				env = probe.Env(base, dir, o)
			}
			cmd := exec.Command(python, script, fmt.Sprint(steps))
			cmd.Env = env
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			start := time.Now()
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s: %v\n%s", c.name, err, errb.String())
			}
			wall := time.Since(start)
			var rep struct {
				LoopS float64 `json:"loop_s"`
			}
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				return fmt.Errorf("%s: %v: %q", c.name, err, out.String())
			}
			ps := cmd.ProcessState
			n := 0
			if c.hz > 0 {
				n = samplesOf(ps.Pid())
			}
			res[i] = append(res[i], run{
				loop:    time.Duration(rep.LoopS * float64(time.Second)),
				wall:    wall,
				cpu:     ps.UserTime() + ps.SystemTime(),
				samples: n,
			})
			fmt.Fprintf(os.Stderr, "round %d %-28s loop %.3fs cpu %.3fs\n", r+1, c.name, rep.LoopS, (ps.UserTime() + ps.SystemTime()).Seconds())
		}
	}
	if runs > 0 {
		printLoop(configs, res, runs, steps, python)
	}
	if pairs > 0 {
		if err := inproc(python, script, dir, l, base, pairs); err != nil {
			return err
		}
	}
	return micro(python, script, dir, l, base)
}

// inproc prints inproc.py's paired on/off blocks within one process.
func inproc(python, trainScript, dir string, l *probe.Listener, base []string, pairs int) error {
	cmd := exec.Command(python, filepath.Join(filepath.Dir(trainScript), "inproc.py"), fmt.Sprint(pairs))
	cmd.Env = probe.Env(base, dir, probe.Options{Socket: l.Path(), Hz: 1})
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("inproc.py: %v", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(out, &m); err != nil {
		return fmt.Errorf("inproc.py: %v: %q", err, out)
	}
	type side struct {
		Median float64 `json:"median_pct"`
		Min    float64 `json:"min_pct"`
		Max    float64 `json:"max_pct"`
		Pairs  int     `json:"pairs"`
	}
	var n int
	json.Unmarshal(m["steps_per_block"], &n)
	fmt.Printf("\nIn one process, blocks of %d steps alternating sampler on/off (the step hook stays installed):\n\n", n)
	fmt.Println("| rate | pairs | median slowdown | min | max |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: |")
	for _, k := range []string{"1 Hz", "20 Hz"} {
		var s side
		if err := json.Unmarshal(m[k], &s); err != nil {
			return fmt.Errorf("inproc.py %s: %v", k, err)
		}
		fmt.Printf("| %s | %d | %+.2f%% | %+.2f%% | %+.2f%% |\n", k, s.Pairs, s.Median, s.Min, s.Max)
	}
	return nil
}

// micro prints per-operation costs (micro.py inside a probed process) and
// interpreter start-up with and without the probe.
func micro(python, trainScript, dir string, l *probe.Listener, base []string) error {
	env := probe.Env(base, dir, probe.Options{Socket: l.Path(), Hz: 1})
	cmd := exec.Command(python, filepath.Join(filepath.Dir(trainScript), "micro.py"))
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("micro.py: %v", err)
	}
	var m struct {
		Torch      string  `json:"torch"`
		StepHook   string  `json:"step_hook"`
		SampleUS   float64 `json:"sample_us"`
		StepHookNS float64 `json:"step_hook_ns"`
	}
	if err := json.Unmarshal(out, &m); err != nil {
		return fmt.Errorf("micro.py: %v: %q", err, out)
	}
	// start times `python -c code` without and with the probe, alternating,
	// and returns the medians (ms).
	start := func(code string) (off, on float64, err error) {
		var ts [2][]float64
		for range 21 {
			for k, e := range [][]string{base, env} {
				c := exec.Command(python, "-c", code)
				c.Env = e
				t0 := time.Now()
				if err := c.Run(); err != nil {
					return 0, 0, err
				}
				ts[k] = append(ts[k], time.Since(t0).Seconds()*1000)
			}
		}
		for k := range ts {
			slices.Sort(ts[k])
		}
		return ts[0][len(ts[0])/2], ts[1][len(ts[1])/2], nil
	}
	fmt.Printf("\nPer-operation costs inside a probed process (torch %s, step hook %s):\n\n", m.Torch, m.StepHook)
	fmt.Println("| operation | cost | share of one core |")
	fmt.Println("| --- | ---: | ---: |")
	fmt.Printf("| one sample (RSS, counters, CUDA check, JSON, send) | %.0f µs | %.4f%% at 1 Hz, %.3f%% at 20 Hz |\n", m.SampleUS, m.SampleUS/1e4, m.SampleUS*20/1e4)
	fmt.Printf("| optimizer step hook | %.0f ns per step | %.4f%% at 1000 steps/s |\n", m.StepHookNS, m.StepHookNS*1000/1e7)
	fmt.Print("\nInterpreter start-up, median of 21 alternating runs (ms):\n\n")
	fmt.Println("| command | without probe | with probe | difference |")
	fmt.Println("| --- | ---: | ---: | ---: |")
	for _, code := range []string{"pass", "import torch"} {
		a, b, err := start(code)
		if err != nil {
			return err
		}
		fmt.Printf("| python -c '%s' | %.1f | %.1f | %+.1f |\n", code, a, b, b-a)
	}
	return nil
}

func printLoop(configs []config, res [][]run, runs, steps int, python string) {
	med := func(rs []run, f func(run) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	loop := func(r run) float64 { return r.loop.Seconds() }
	cpu := func(r run) float64 { return r.cpu.Seconds() }
	wall := func(r run) float64 { return r.wall.Seconds() }
	// Paired: each round's probe run against that round's run without it.
	paired := func(i int, f func(run) float64) float64 {
		rs := make([]run, len(res[i]))
		for j := range res[i] {
			rs[j] = run{loop: time.Duration(float64(time.Second) * (f(res[i][j])/f(res[0][j]) - 1))}
		}
		return med(rs, loop)
	}
	fmt.Printf("%d rounds x %d steps (%s, %s)\n\n", runs, steps, python, time.Now().UTC().Format("2006-01-02"))
	fmt.Println("| configuration | median loop (s) | loop vs without (median of medians) | loop vs without (median of paired rounds) | median process CPU (s) | CPU vs without | median wall incl. start (s) | samples per run |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for i, c := range configs {
		pct := func(a, b float64) string { return fmt.Sprintf("%+.2f%%", (a/b-1)*100) }
		lv, cv := "–", "–"
		pv := "–"
		if i > 0 {
			lv = pct(med(res[i], loop), med(res[0], loop))
			cv = pct(med(res[i], cpu), med(res[0], cpu))
			pv = fmt.Sprintf("%+.2f%%", paired(i, loop)*100)
		}
		fmt.Printf("| %s | %.3f | %s | %s | %.3f | %s | %.3f | %s |\n", c.name, med(res[i], loop), lv, pv, med(res[i], cpu), cv, med(res[i], wall),
			strings.TrimSpace(fmt.Sprint(med(res[i], func(r run) float64 { return float64(r.samples) }))))
	}
}
