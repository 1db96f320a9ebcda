package ckpt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// torchZipMetric builds a torch-style archive whose pickle is
// {"step": step, "loss": loss, "w": <tensor>}.
func torchZipMetric(t *testing.T, step uint16, loss float64) []byte {
	t.Helper()
	var p bytes.Buffer
	p.WriteString("X\x04\x00\x00\x00stepM")
	binary.Write(&p, binary.LittleEndian, step)
	p.WriteString("X\x04\x00\x00\x00lossG")
	binary.Write(&p, binary.BigEndian, math.Float64bits(loss))
	return torchZipWith(t, "archive", p.Bytes(), true)
}

func randomEntries(r *rand.Rand) []Entry {
	n := r.Intn(12)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	withStep := r.Intn(2) == 0
	es := make([]Entry, n)
	for i := range es {
		e := Entry{Path: fmt.Sprintf("/d/s%d/c%02d", r.Intn(2), i), Valid: r.Intn(4) != 0, Size: int64(1 + r.Intn(1000)),
			ModTime: t0.Add(time.Duration(r.Intn(50)) * time.Minute), Kind: KindCheckpoint}
		e.Series = SeriesOf(e.Path)
		if !e.Valid {
			e.Reason, e.Kind = "truncated", KindInvalid
		}
		if r.Intn(6) == 0 {
			e.Kind, e.Note = KindOther, "holds no tensors"
		}
		if withStep && e.Valid {
			s := int64(r.Intn(20) * 50)
			e.Step = &s
		}
		if e.Valid && r.Intn(3) != 0 {
			e.Metrics = map[string]float64{"loss": float64(r.Intn(100)) / 10}
		}
		es[i] = e
	}
	return es
}

// TestPruneProperties: over random directories and policies, in every
// series the newest valid checkpoint, the best one and everything newer than
// the newest valid one are kept; nothing that is not a checkpoint is ever
// deleted; and the plan accounts for every entry.
func TestPruneProperties(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for iter := 0; iter < 2000; iter++ {
		es := randomEntries(r)
		pol := PrunePolicy{KeepLast: r.Intn(3), KeepEvery: []int{0, 100, 250}[r.Intn(3)]}
		if r.Intn(2) == 0 {
			pol.Metric, pol.Mode, pol.KeepBest = "loss", []string{"min", "max"}[r.Intn(2)], r.Intn(3)
		}
		plan, err := PlanPrune(es, pol)
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Items)+len(plan.LeftAlone) != len(es) {
			t.Fatalf("iter %d: %d items and %d left alone for %d entries", iter, len(plan.Items), len(plan.LeftAlone), len(es))
		}
		kept := map[string]bool{}
		var freed int64
		for _, it := range plan.Items {
			kept[it.Path] = it.Keep
			if !it.Keep {
				freed += it.Size
			}
		}
		for _, la := range plan.LeftAlone {
			kept[la.Path] = true
		}
		if freed != plan.FreedBytes {
			t.Fatalf("iter %d: freed %d, plan says %d", iter, freed, plan.FreedBytes)
		}
		for _, e := range es {
			if e.Kind == KindOther && !kept[e.Path] {
				t.Fatalf("iter %d: %s is not a checkpoint and was deleted", iter, e.Path)
			}
		}
		bySeries := map[string][]Entry{}
		for _, e := range es {
			if e.Kind != KindOther {
				bySeries[e.Series] = append(bySeries[e.Series], e)
			}
		}
		for name, ses := range bySeries {
			best := pickLatest(ses).Best
			if best == nil {
				for _, e := range ses {
					if !kept[e.Path] {
						t.Fatalf("iter %d: deleted %s with no valid checkpoint in series %s", iter, e.Path, name)
					}
				}
				continue
			}
			if !kept[best.Path] {
				t.Fatalf("iter %d: newest valid %s deleted (policy %+v)", iter, best.Path, pol)
			}
			for _, e := range ses {
				if Newer(&e, best) && !kept[e.Path] {
					t.Fatalf("iter %d: %s is newer than the newest valid and was deleted", iter, e.Path)
				}
			}
			if pol.Metric != "" {
				var bestPath string
				var bestV float64
				for _, e := range ses {
					v, ok := e.Metrics["loss"]
					if !ok || e.Kind != KindCheckpoint {
						continue
					}
					if bestPath == "" || (pol.Mode == "min" && v < bestV) || (pol.Mode == "max" && v > bestV) {
						bestPath, bestV = e.Path, v
					}
				}
				if bestPath != "" {
					// Ties: some entry with the best value must be kept.
					ok := false
					for _, e := range ses {
						if v, has := e.Metrics["loss"]; has && e.Kind == KindCheckpoint && v == bestV && kept[e.Path] {
							ok = true
						}
					}
					if !ok {
						t.Fatalf("iter %d: no checkpoint with the best loss %v kept in %s", iter, bestV, name)
					}
				}
			}
		}
	}
}

// TestPruneOnDisk: a dry run deletes nothing; --apply deletes exactly the
// planned files and keeps the newest valid and the best.
func TestPruneOnDisk(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for iter := 0; iter < 15; iter++ {
		dir := t.TempDir()
		n := 1 + r.Intn(8)
		for i := 0; i < n; i++ {
			data := torchZipMetric(t, uint16(100*(i+1)), float64(r.Intn(50))/10)
			if r.Intn(4) == 0 {
				data = data[:len(data)/2]
			}
			writeAt(t, filepath.Join(dir, fmt.Sprintf("sub%d/ck%d.bin", i%2, i)), data, t0.Add(time.Duration(i)*time.Minute))
		}
		writeAt(t, filepath.Join(dir, "train.log"), []byte("loss 0.1\n"), t0)
		before := listFiles(t, dir)
		pol := PrunePolicy{KeepLast: r.Intn(3), Metric: "loss", Mode: "min", KeepBest: 1}
		plan, err := Prune(dir, pol, false)
		if err != nil {
			t.Fatal(err)
		}
		if after := listFiles(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("dry run changed the directory: %v -> %v", before, after)
		}
		best, _, _ := Latest(dir)
		applied, err := Prune(dir, pol, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(applied.Deleted) != countDeletes(plan) {
			t.Fatalf("deleted %d, planned %d", len(applied.Deleted), countDeletes(plan))
		}
		if best != nil {
			if _, err := os.Stat(best.Path); err != nil {
				t.Fatalf("newest valid %s was deleted", best.Path)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "train.log")); err != nil {
			t.Fatal("a non-checkpoint file was deleted")
		}
		for _, it := range plan.Items {
			_, err := os.Stat(it.Path)
			if it.Keep && err != nil {
				t.Fatalf("kept %s is gone", it.Path)
			}
			if !it.Keep && err == nil {
				t.Fatalf("planned deletion %s still exists", it.Path)
			}
		}
	}
}

func countDeletes(p *PrunePlan) int {
	n := 0
	for _, it := range p.Items {
		if !it.Keep {
			n++
		}
	}
	return n
}

func listFiles(t *testing.T, dir string) []string {
	var out []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			out = append(out, fmt.Sprintf("%s:%d", p, info.Size()))
		}
		return nil
	})
	return out
}

func TestPrunePolicyValidate(t *testing.T) {
	bad := []PrunePolicy{{KeepLast: -1}, {KeepBest: 1}, {Metric: "loss", Mode: "up"}}
	for _, p := range bad {
		if p.Validate() == nil {
			t.Errorf("%+v: want an error", p)
		}
	}
	if (PrunePolicy{KeepLast: 2, Metric: "acc", Mode: "max", KeepBest: 2}).Validate() != nil {
		t.Error("valid policy rejected")
	}
}
