// Command notebook-bench measures what the notebook side of the probe costs:
// the time a cell takes with and without the extension when nothing is
// printed (and the tracker's two callbacks alone), and `%vramguard who` over a
// namespace of about a million objects (dicts and lists, then instances of a
// class) beside a bare gc pass that finds the tensors without naming any
// holder. It prints Markdown table rows.
//
//	go run ./bench/probe/notebook -cells 2000 -objects 1000000 -rounds 5
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/vramguard/vramguard/bench/probe/probetmp"
)

func main() {
	cells := flag.Int("cells", 2000, "cells per block")
	objects := flag.Int("objects", 1000000, "Python objects behind the notebook's names")
	rounds := flag.Int("rounds", 5, "interleaved rounds (medians)")
	tensors := flag.Int("tensors", 100000, "scalar tensors in one list, for the many-small-tensors scan")
	python := flag.String("python", "/usr/bin/python3", "interpreter with IPython and torch")
	flag.Parse()
	if err := bench(*python, *cells, *objects, *rounds, *tensors); err != nil {
		fmt.Fprintln(os.Stderr, "notebook-bench:", err)
		os.Exit(1)
	}
}

func bench(python string, cells, objects, rounds, tensors int) error {
	tmp, dir, remove, err := probetmp.Install("vgnbbench-")
	if err != nil {
		return err
	}
	defer remove()
	_, here, _, _ := runtime.Caller(0)
	cmd := exec.Command(python, filepath.Join(filepath.Dir(here), "notebook.py"),
		fmt.Sprint(cells), fmt.Sprint(objects), fmt.Sprint(rounds), fmt.Sprint(tensors))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "OMP_NUM_THREADS=1", "IPYTHONDIR="+filepath.Join(tmp, "ipython"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s: %w", python, err)
	}
	var r struct {
		CellOff    float64 `json:"cell_off_us"`
		CellOn     float64 `json:"cell_on_us"`
		Hooks      float64 `json:"hooks_us"`
		HostPeak   string  `json:"host_peak"`
		GCObjects  int     `json:"gc_objects"`
		Who        float64 `json:"who_s"`
		WhoCPU     float64 `json:"who_cpu_s"`
		ObjsGC     int     `json:"gc_objects_objs"`
		WhoObjs    float64 `json:"who_objs_s"`
		WhoObjsCPU float64 `json:"who_objs_cpu_s"`
		GCTensors  float64 `json:"gc_tensors_s"`
		Storages   int     `json:"storages"`
		Loop       float64 `json:"loop_s"`
		Scalars    float64 `json:"who_scalars_s"`
		ScalarsCPU float64 `json:"who_scalars_cpu_s"`
		Named      int     `json:"scalars_named"`
		GCScalars  float64 `json:"gc_scalars_s"`
		GCSized    float64 `json:"gc_scalars_sized_s"`
		Load       float64 `json:"load"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return fmt.Errorf("bench output %q: %w", out, err)
	}
	date := time.Now().UTC().Format("2006-01-02")
	repro := fmt.Sprintf("go run ./bench/probe/notebook -cells %d -objects %d -rounds %d -tensors %d", cells, objects, rounds, tensors)
	fmt.Println("| area | figure | baseline | command | date |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Printf("| notebook: cost per cell, nothing printed | +%.0f µs a cell (%.0f µs with the extension; tracker callbacks alone %.0f µs, host peak by %s) | %.0f µs a `pass` cell without it | `%s` | %s |\n",
		r.CellOn-r.CellOff, r.CellOn, r.Hooks, r.HostPeak, r.CellOff, repro, date)
	fmt.Printf("| notebook: `%%vramguard who`, dicts and lists | %.2f s (%.2f s CPU) over %d gc objects (%d storages named) | %.2f s for a bare gc pass finding the tensors, no holder named; %.2f s for one Python loop over the rows (the machine's speed) | `%s` | %s |\n",
		r.Who, r.WhoCPU, r.GCObjects, r.Storages, r.GCTensors, r.Loop, repro, date)
	fmt.Printf("| notebook: `%%vramguard who`, instances of a class | %.2f s (%.2f s CPU) over %d gc objects | the rows above | `%s` | %s |\n",
		r.WhoObjs, r.WhoObjsCPU, r.ObjsGC, repro, date)
	fmt.Printf("| notebook: `%%vramguard who`, %d scalar tensors in one list (%d named) | %.2f s (%.2f s CPU) | %.2f s for a gc pass listing the tensors, no holder named; %.2f s with their storages summed | `%s` | %s, load %.1f |\n",
		tensors, r.Named, r.Scalars, r.ScalarsCPU, r.GCScalars, r.GCSized, repro, date, r.Load)
	return nil
}
