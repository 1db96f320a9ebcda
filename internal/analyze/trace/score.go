package trace

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/vramguard/vramguard/internal/analyze"
)

// Label is one trace's ground truth, as labels.json holds it.
type Label struct {
	Family          string   `json:"family"`
	Leak            bool     `json:"leak"`
	LeakStartT      *float64 `json:"leak_start_t"`
	LeakRate        *float64 `json:"leak_rate"`
	OOMT            *float64 `json:"oom_t"`
	NVMLOnly        bool     `json:"nvml_only"`
	UnboundedGrowth bool     `json:"unbounded_growth"`
}

// Positive is what a leak verdict is scored against: the leak label where
// allocated was recorded, unbounded growth (leak or fragmentation) where only
// NVML watched and the two cannot be told apart.
func (l Label) Positive() bool {
	if l.NVMLOnly {
		return l.UnboundedGrowth
	}
	return l.Leak
}

// ReadLabels reads dir/labels.json.
func ReadLabels(dir string) (map[string]Label, error) {
	p := filepath.Join(dir, "labels.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var m map[string]Label
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse %s: %w", p, err)
	}
	return m, nil
}

// Analyze feeds samples one by one to a new detector and returns its report
// after the last one, as `vramguard analyze` does (analyze.Replay).
func Analyze(samples []analyze.Sample, cfg analyze.Config) analyze.Report {
	return analyze.Replay(samples, cfg)
}

// Result is one trace's outcome.
type Result struct {
	Name     string  `json:"name"`
	Family   string  `json:"family"`
	Positive bool    `json:"positive"` // the scoring truth
	Verdict  string  `json:"verdict"`
	Alarm    bool    `json:"alarm"`             // the online detector raised a leak at some sample
	Delay    float64 `json:"delay_s,omitempty"` // detection time minus labelled leak start
	ETA      float64 `json:"oom_eta_s,omitempty"`
	WantETA  float64 `json:"want_eta_s,omitempty"` // labelled oom_t minus the last sample's time
	ETAErr   float64 `json:"eta_rel_err,omitempty"`
	ETAScore bool    `json:"eta_scored"` // a leaking trace with a labelled OOM time
	// AtOOM marks a scored trace that stops at its OOM: the labelled
	// remaining time is under two sampling intervals, so ±25% of it is a
	// fraction of one interval, finer than the samples can resolve
	AtOOM bool `json:"ends_at_oom,omitempty"`
}

// Tally is precision, recall and the rest over a set of traces.
type Tally struct {
	Family       string  `json:"family"`
	Traces       int     `json:"traces"`
	Positives    int     `json:"positives"`
	TP           int     `json:"tp"`
	FP           int     `json:"fp"`
	FN           int     `json:"fn"`
	FalseAlarms  int     `json:"false_alarms"` // online alarms on traces whose truth is negative
	Precision    float64 `json:"precision"`
	Recall       float64 `json:"recall"`
	MedianDelay  float64 `json:"median_delay_s"`  // NaN-free: -1 when no delay was measured
	ETAScored    int     `json:"eta_scored"`      // leaking traces with a labelled OOM time
	ETAWithin25  int     `json:"eta_within_25pc"` // of those, ETA within ±25% of the labelled remaining time
	ETAFraction  float64 `json:"eta_fraction"`
	ETAAtOOM     int     `json:"eta_at_oom"`        // scored traces that stop at their OOM (see Result.AtOOM)
	ETAOpen      int     `json:"eta_open"`          // the others
	ETAOpenIn25  int     `json:"eta_open_within"`   // of those, within ±25%
	ETAOpenFrac  float64 `json:"eta_open_fraction"` // ETAOpenIn25 / ETAOpen
	MedianETAErr float64 `json:"median_eta_rel_err"`
	delays, errs []float64
}

// Score is the outcome over a directory.
type Score struct {
	All      Tally    `json:"all"`
	Families []Tally  `json:"families"`
	Results  []Result `json:"results"`
}

// ScoreDir runs the detector over every labelled trace in dir.
func ScoreDir(dir string, cfg analyze.Config) (Score, error) {
	labels, err := ReadLabels(dir)
	if err != nil {
		return Score{}, err
	}
	names := make([]string, 0, len(labels))
	for n := range labels {
		names = append(names, n)
	}
	sort.Strings(names)
	var sc Score
	for _, n := range names {
		samples, err := ReadFile(filepath.Join(dir, n))
		if err != nil {
			return Score{}, err
		}
		sc.Results = append(sc.Results, Judge(n, labels[n], samples, cfg))
	}
	sc.tally()
	return sc, nil
}

// Merge adds another score's results (e.g. another seed's directory).
func (sc *Score) Merge(o Score) {
	sc.Results = append(sc.Results, o.Results...)
	sc.tally()
}

// Judge scores one trace.
func Judge(name string, l Label, samples []analyze.Sample, cfg analyze.Config) Result {
	rep := Analyze(samples, cfg)
	res := Result{Name: name, Family: l.Family, Positive: l.Positive(), Verdict: string(rep.Verdict),
		Alarm: !math.IsNaN(rep.DetectedAtT)}
	if res.Alarm && res.Positive && l.LeakStartT != nil {
		res.Delay = rep.DetectedAtT - *l.LeakStartT
	}
	if l.Leak && l.OOMT != nil && len(samples) > 0 {
		res.ETAScore = true
		res.WantETA = *l.OOMT - samples[len(samples)-1].T
		if n := len(samples); n > 1 {
			res.AtOOM = res.WantETA < 2*(samples[n-1].T-samples[n-2].T)
		}
		res.ETAErr = math.Inf(1)
		if !math.IsNaN(rep.OOMETA) && res.WantETA > 0 {
			res.ETA = rep.OOMETA
			res.ETAErr = math.Abs(rep.OOMETA-res.WantETA) / res.WantETA
		}
	}
	return res
}

func (sc *Score) tally() {
	by := map[string]*Tally{}
	sc.All = Tally{Family: "all"}
	for _, r := range sc.Results {
		t := by[r.Family]
		if t == nil {
			t = &Tally{Family: r.Family}
			by[r.Family] = t
		}
		for _, x := range []*Tally{t, &sc.All} {
			x.add(r)
		}
	}
	sc.Families = sc.Families[:0]
	for _, t := range by {
		t.finish()
		sc.Families = append(sc.Families, *t)
	}
	sort.Slice(sc.Families, func(i, j int) bool { return sc.Families[i].Family < sc.Families[j].Family })
	sc.All.finish()
}

func (t *Tally) add(r Result) {
	t.Traces++
	leak := r.Verdict == string(analyze.VerdictLeak)
	if r.Positive {
		t.Positives++
		if leak {
			t.TP++
		} else {
			t.FN++
		}
		if r.Alarm && r.Delay != 0 {
			t.delays = append(t.delays, r.Delay)
		}
	} else {
		if leak {
			t.FP++
		}
		if r.Alarm {
			t.FalseAlarms++
		}
	}
	if r.ETAScore {
		t.ETAScored++
		in := r.ETAErr <= ETATolerance
		if in {
			t.ETAWithin25++
		}
		if r.AtOOM {
			t.ETAAtOOM++
		} else {
			t.ETAOpen++
			if in {
				t.ETAOpenIn25++
			}
		}
		t.errs = append(t.errs, r.ETAErr)
	}
}

func (t *Tally) finish() {
	t.Precision, t.Recall, t.ETAFraction = 1, 1, 1
	if t.TP+t.FP > 0 {
		t.Precision = float64(t.TP) / float64(t.TP+t.FP)
	}
	if t.Positives > 0 {
		t.Recall = float64(t.TP) / float64(t.Positives)
	}
	if t.ETAScored > 0 {
		t.ETAFraction = float64(t.ETAWithin25) / float64(t.ETAScored)
	}
	t.ETAOpenFrac = 1
	if t.ETAOpen > 0 {
		t.ETAOpenFrac = float64(t.ETAOpenIn25) / float64(t.ETAOpen)
	}
	t.MedianDelay = median(t.delays)
	t.MedianETAErr = median(t.errs)
	if math.IsInf(t.MedianETAErr, 1) {
		t.MedianETAErr = 999
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return -1
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Thresholds of the acceptance criteria.
const (
	MinPrecision = 0.95
	MinRecall    = 0.95
	MinETAWithin = 0.80
	ETATolerance = 0.25
)

// NoAlarmFamilies must never see an online leak alarm.
var NoAlarmFamilies = []string{"steady", "eval_phases", "variable_length"}

// Miss is an acceptance threshold a score misses.
type Miss struct {
	What string // "precision", "recall", "oom_eta" or "false_alarms"
	Text string
}

func (m Miss) String() string { return m.Text }

// Check returns the acceptance thresholds sc misses (none: it passes).
func Check(sc Score) []Miss {
	var m []Miss
	a := sc.All
	if a.Precision < MinPrecision {
		m = append(m, Miss{"precision", fmt.Sprintf("precision %.3f < %.2f", a.Precision, MinPrecision)})
	}
	if a.Recall < MinRecall {
		m = append(m, Miss{"recall", fmt.Sprintf("recall %.3f < %.2f", a.Recall, MinRecall)})
	}
	if a.ETAScored > 0 && a.ETAFraction < MinETAWithin {
		m = append(m, Miss{"oom_eta", fmt.Sprintf("OOM ETA within ±25%% for %.3f of leaking traces < %.2f (%d of %d stop at their OOM; of the rest %d/%d = %.3f)",
			a.ETAFraction, MinETAWithin, a.ETAAtOOM, a.ETAScored, a.ETAOpenIn25, a.ETAOpen, a.ETAOpenFrac)})
	}
	for _, t := range sc.Families {
		if slices.Contains(NoAlarmFamilies, t.Family) && t.FalseAlarms > 0 {
			m = append(m, Miss{"false_alarms", fmt.Sprintf("%d false alarms on %s", t.FalseAlarms, t.Family)})
		}
	}
	return m
}
