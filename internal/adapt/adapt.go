// Package adapt decides how a job that died of memory comes back with
// settings that fit (`vramguard run --adapt`): a smaller batch with more
// gradient accumulation after a GPU out-of-memory, the allocator setting
// that fights fragmentation when the OOM says the cache held enough memory
// but not in one piece, fewer DataLoader workers after /dev/shm filled up or
// the host OOM killer struck. The supervisor substitutes the settings into
// the job's command ({batch}, {accum}, {workers}) and environment
// (VRAMGUARD_BATCH, VRAMGUARD_ACCUM, VRAMGUARD_WORKERS,
// PYTORCH_CUDA_ALLOC_CONF) for each attempt; this package only decides, from
// the ended attempt's verdict, what the next attempt runs with and why.
// docs/ADAPT.md is the user's account of the policy.
package adapt

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/units"
)

// Unset marks a setting vramguard does not manage (its flag was not given).
const Unset = -1

// Settings are what an attempt runs with. Batch, Accum and Workers are
// Unset when not managed; AllocConf is the PYTORCH_CUDA_ALLOC_CONF value
// vramguard set ("" for none: the job's own environment stands).
type Settings struct {
	Batch     int
	Accum     int
	Workers   int
	AllocConf string
}

// MarshalJSON writes the managed settings only.
func (s Settings) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	if s.Batch != Unset {
		m["batch"] = s.Batch
	}
	if s.Accum != Unset {
		m["accum"] = s.Accum
	}
	if s.Workers != Unset {
		m["workers"] = s.Workers
	}
	if s.AllocConf != "" {
		m["alloc_conf"] = s.AllocConf
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (s *Settings) UnmarshalJSON(b []byte) error {
	var m struct {
		Batch, Accum, Workers *int
		AllocConf             string `json:"alloc_conf"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	get := func(p *int) int {
		if p == nil {
			return Unset
		}
		return *p
	}
	*s = Settings{Batch: get(m.Batch), Accum: get(m.Accum), Workers: get(m.Workers), AllocConf: m.AllocConf}
	return nil
}

// String lists the managed settings: "batch 16, accum 4, workers 2".
func (s Settings) String() string {
	var parts []string
	for _, kv := range []struct {
		name string
		v    int
	}{{"batch", s.Batch}, {"accum", s.Accum}, {"workers", s.Workers}} {
		if kv.v != Unset {
			parts = append(parts, fmt.Sprintf("%s %d", kv.name, kv.v))
		}
	}
	if s.AllocConf != "" {
		parts = append(parts, "PYTORCH_CUDA_ALLOC_CONF="+s.AllocConf)
	}
	return strings.Join(parts, ", ")
}

// Placeholders maps each placeholder of the job's command to its value
// under s (managed settings only).
func (s Settings) Placeholders() map[string]string {
	m := map[string]string{}
	if s.Batch != Unset {
		m["{batch}"] = strconv.Itoa(s.Batch)
	}
	if s.Accum != Unset {
		m["{accum}"] = strconv.Itoa(s.Accum)
	}
	if s.Workers != Unset {
		m["{workers}"] = strconv.Itoa(s.Workers)
	}
	return m
}

// Env returns the environment variables s sets: VRAMGUARD_BATCH,
// VRAMGUARD_ACCUM, VRAMGUARD_WORKERS for managed settings, and
// PYTORCH_CUDA_ALLOC_CONF (merged into base, the job's own value) when
// AllocConf is set.
func (s Settings) Env(base string) map[string]string {
	m := map[string]string{}
	for name, v := range map[string]int{"VRAMGUARD_BATCH": s.Batch, "VRAMGUARD_ACCUM": s.Accum, "VRAMGUARD_WORKERS": s.Workers} {
		if v != Unset {
			m[name] = strconv.Itoa(v)
		}
	}
	if s.AllocConf != "" {
		m["PYTORCH_CUDA_ALLOC_CONF"] = MergeAllocConf(base, s.AllocConf)
	}
	return m
}

// MergeAllocConf adds add's options to conf (PYTORCH_CUDA_ALLOC_CONF's
// comma-separated key:value list), replacing options of the same key.
func MergeAllocConf(conf, add string) string {
	keys := map[string]bool{}
	for _, kv := range strings.Split(add, ",") {
		k, _, _ := strings.Cut(kv, ":")
		keys[strings.TrimSpace(k)] = true
	}
	var out []string
	for _, kv := range strings.Split(conf, ",") {
		k, _, _ := strings.Cut(kv, ":")
		if strings.TrimSpace(kv) == "" || keys[strings.TrimSpace(k)] {
			continue
		}
		out = append(out, kv)
	}
	return strings.Join(append(out, add), ",")
}

// Step is one adaptation: the attempt that ran with it, the reason of the
// attempt before, each changed setting as [from, to], and why.
type Step struct {
	Attempt     int               `json:"attempt"`
	AfterReason string            `json:"after_reason"`
	Changes     map[string][2]any `json:"changes"`
	Why         string            `json:"why"`
}

// String is the line users read: "attempt 2 after cuda_oom: batch 64→32,
// accum 1→2".
func (st Step) String() string {
	var parts []string
	for _, name := range []string{"batch", "accum", "workers", "alloc_conf"} {
		c, ok := st.Changes[name]
		if !ok {
			continue
		}
		if name == "alloc_conf" {
			parts = append(parts, fmt.Sprintf("PYTORCH_CUDA_ALLOC_CONF=%v", c[1]))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %v→%v", name, c[0], c[1]))
	}
	return fmt.Sprintf("attempt %d after %s: %s", st.Attempt, st.AfterReason, strings.Join(parts, ", "))
}

// Policy holds what the decisions depend on besides the verdict.
type Policy struct {
	// MinBatch is the smallest batch tried (--min-batch, at least 1).
	MinBatch int
}

// Ended is what the policy reads of an ended attempt.
type Ended struct {
	Attempt int
	Verdict diagnose.Verdict
	// Torch is the job's torch version as the probe saw it ("" unknown).
	Torch string
	// Processes is the most processes the job's tree held at once (a
	// DataLoader's workers show here).
	Processes int
}

// Decision is what the next attempt runs with.
type Decision struct {
	Next Settings
	// Step is the change made; nil when the settings stay as they were.
	Step *Step
	// Note says why nothing changed (Step nil), "" when the reason is not
	// one the policy addresses.
	Note string
	// Exhausted says nothing is left to change for a reason the policy
	// addresses (the batch is at MinBatch, the workers at 0): restarting
	// would fail the same way.
	Exhausted bool
}

// Decide applies the policy (docs/ADAPT.md) to an attempt that ended with
// e, run with cur.
func (p Policy) Decide(cur Settings, e Ended) Decision {
	d := Decision{Next: cur}
	v := e.Verdict
	switch {
	case isGPUOOM(v):
		if v.OOM != nil && v.OOM.Fragmented && cur.AllocConf == "" && backendHasAllocConf(v.OOM.Backend) {
			conf, why := allocConf(e.Torch, v.OOM)
			d.Next.AllocConf = conf
			d.Step = p.step(e, map[string][2]any{"alloc_conf": {"", conf}}, why)
			return d
		}
		return p.smallerBatch(d, cur, e, oomRatio(v.OOM))
	case v.Reason == diagnose.ShmExhausted || v.Reason == diagnose.DataloaderDied:
		return p.fewerWorkers(d, cur, e)
	case v.Reason == diagnose.HostOOMKilled:
		if cur.Workers > 0 {
			return p.fewerWorkers(d, cur, e)
		}
		return p.smallerBatch(d, cur, e, 0)
	}
	return d
}

func (p Policy) step(e Ended, changes map[string][2]any, why string) *Step {
	return &Step{Attempt: e.Attempt + 1, AfterReason: e.Verdict.Reason, Changes: changes, Why: why}
}

// smallerBatch halves the batch, or cuts it further when the OOM's numbers
// say the job needed more than twice what it had (ratio is have/need, 0
// when unknown), and multiplies accumulation by the same factor.
func (p Policy) smallerBatch(d Decision, cur Settings, e Ended, ratio float64) Decision {
	minBatch := max(p.MinBatch, 1)
	if cur.Batch == Unset {
		d.Note = fmt.Sprintf("nothing to adapt for %s: give --batch and use {batch} (or $VRAMGUARD_BATCH) in the command", e.Verdict.Reason)
		d.Exhausted = true
		return d
	}
	if cur.Batch <= minBatch {
		d.Note = fmt.Sprintf("the batch is already at --min-batch %d and the job still ended with %s", minBatch, e.Verdict.Reason)
		d.Exhausted = true
		return d
	}
	k := 1
	why := "halved the batch"
	if ratio > 0 && ratio < 0.5 {
		// Memory grows with the batch: aim at 90% of what fit.
		target := float64(cur.Batch) * ratio * 0.9
		for k < 30 && float64(cur.Batch>>k) > target && cur.Batch>>(k+1) >= minBatch {
			k++
		}
		if k > 1 {
			why = fmt.Sprintf("the OOM's numbers say the job had %.0f%% of the memory it asked for, so the batch was cut %d-fold, not halved", ratio*100, 1<<k)
		}
	}
	next := max(cur.Batch>>k, minBatch)
	d.Next.Batch = next
	changes := map[string][2]any{"batch": {cur.Batch, next}}
	if cur.Accum != Unset {
		eff := cur.Batch * cur.Accum
		acc := (eff + next - 1) / next
		d.Next.Accum = acc
		changes["accum"] = [2]any{cur.Accum, acc}
		if next*acc != eff {
			why += fmt.Sprintf("; the effective batch is %d instead of %d (%d does not divide it)", next*acc, eff, next)
		} else {
			why += fmt.Sprintf(" and multiplied gradient accumulation, so the effective batch stays %d", eff)
		}
	}
	d.Step = p.step(e, changes, why)
	return d
}

// fewerWorkers halves the DataLoader workers, down to 0 (loading in the
// main process).
func (p Policy) fewerWorkers(d Decision, cur Settings, e Ended) Decision {
	switch {
	case cur.Workers == Unset:
		d.Note = fmt.Sprintf("nothing to adapt for %s: give --workers and use {workers} (or $VRAMGUARD_WORKERS) in the command", e.Verdict.Reason)
		d.Exhausted = true
		return d
	case cur.Workers == 0:
		if e.Verdict.Reason == diagnose.HostOOMKilled {
			return p.smallerBatch(d, cur, e, 0)
		}
		d.Note = fmt.Sprintf("the DataLoader already loads in the main process (workers 0) and the job still ended with %s", e.Verdict.Reason)
		d.Exhausted = true
		return d
	}
	next := cur.Workers / 2
	d.Next.Workers = next
	why := "halved the DataLoader workers: each holds its own copy of the dataset's memory and its batches in /dev/shm"
	if e.Verdict.Reason == diagnose.HostOOMKilled {
		why = "halved the DataLoader workers first: each is a process with its own memory, the cheapest to give up; the batch comes next"
	}
	d.Step = p.step(e, map[string][2]any{"workers": {cur.Workers, next}}, why)
	return d
}

// oomRatio is the share of the memory it asked for that the job had:
// (allocated + free) / (allocated + tried); 0 when the message lacks them.
func oomRatio(o *diagnose.OOM) float64 {
	if o == nil || o.TriedBytes == nil || o.FreeBytes == nil || o.AllocatedBytes == nil {
		return 0
	}
	need := float64(*o.AllocatedBytes) + float64(*o.TriedBytes)
	if need <= 0 {
		return 0
	}
	return (float64(*o.AllocatedBytes) + float64(*o.FreeBytes)) / need
}

// isGPUOOM: a CUDA OOM, or an accelerator OOM under a reason of its own
// (the numbers parsed the same way).
func isGPUOOM(v diagnose.Verdict) bool {
	return v.Reason == diagnose.CUDAOOM || v.OOM != nil && strings.HasSuffix(v.Reason, "_oom") && v.Reason != diagnose.HostOOMKilled
}

func backendHasAllocConf(b string) bool { return b == "" || b == "cuda" || b == "hip" }

// allocConf is the allocator setting against fragmentation for torch
// version v: expandable segments from 2.1 on, else max_split_size_mb sized
// to the failed request (blocks that large are then never split for
// smaller ones, so a request of that size finds one whole).
func allocConf(v string, o *diagnose.OOM) (string, string) {
	if AtLeast(v, 2, 1) {
		return "expandable_segments:True", fmt.Sprintf("the OOM was fragmentation (the cache held the request's size but not in one block); torch %s grows segments in place with expandable_segments, same batch", v)
	}
	mb := 128
	if o.TriedBytes != nil {
		mb = int(math.Ceil(float64(*o.TriedBytes) / (1 << 20)))
		// a power of two, at least 32 MiB (torch refuses 20 or less)
		p := 32
		for p < mb {
			p *= 2
		}
		mb = p
	}
	what := "torch < 2.1"
	if v == "" {
		what = "an unknown torch version (the probe did not report one)"
	}
	tried := ""
	if o.TriedBytes != nil {
		tried = " (the request was " + units.FormatBytes(*o.TriedBytes) + ")"
	}
	return fmt.Sprintf("max_split_size_mb:%d", mb), fmt.Sprintf("the OOM was fragmentation; on %s max_split_size_mb keeps blocks of %d MiB whole%s, same batch", what, mb, tried)
}

// AtLeast reports whether torch version v ("2.3.1+cu121", "1.13.0a0") is at
// least major.minor; false for "" or garbage.
func AtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	digits := parts[1]
	if i := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		digits = digits[:i]
	}
	mi, err2 := strconv.Atoi(digits)
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// NoEffect says, for an attempt that ended the same way as the one before
// although a setting changed in between, why the change appears to have
// had no effect ("" when it did, or when that cannot be told): a GPU OOM
// that asked for exactly the same bytes after the batch changed, or a job
// that ran as many processes after its workers were cut.
func NoEffect(prev, cur Ended, step *Step) string {
	if step == nil || prev.Verdict.Reason != cur.Verdict.Reason {
		return ""
	}
	if c, ok := step.Changes["batch"]; ok {
		po, co := prev.Verdict.OOM, cur.Verdict.OOM
		if po != nil && co != nil && po.TriedBytes != nil && co.TriedBytes != nil && *po.TriedBytes == *co.TriedBytes {
			return fmt.Sprintf("the adaptation had no effect: with batch %v the job asked for %s again, exactly as with batch %v; does the command pass {batch} (or read $VRAMGUARD_BATCH)?",
				c[1], units.FormatBytes(*co.TriedBytes), c[0])
		}
	}
	if c, ok := step.Changes["workers"]; ok && cur.Processes > 0 && cur.Processes >= prev.Processes {
		return fmt.Sprintf("the adaptation had no effect: with workers %v the job ran %d processes at once, as with workers %v; does the command pass {workers} (or read $VRAMGUARD_WORKERS)?",
			c[1], cur.Processes, c[0])
	}
	return ""
}
