package doctor

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// AllocOption is one key:value of PYTORCH_CUDA_ALLOC_CONF.
type AllocOption struct {
	Key, Value string
}

// ParseAllocConf splits an allocator config the way c10's
// CachingAllocatorConfig tokenizer does: options separated by commas, key and
// value by a colon, and a bracketed list value ("[256:1,512:2,>:4]") kept
// whole. It reports malformed text; value checks are AllocProblems's job.
func ParseAllocConf(s string) ([]AllocOption, error) {
	var out []AllocOption
	depth, start := 0, 0
	var parts []string
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("unbalanced ']' at offset %d", i)
			}
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unclosed '['")
	}
	parts = append(parts, s[start:])
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		k, v, ok := strings.Cut(p, ":")
		if !ok {
			return nil, fmt.Errorf("%q has no ':' (want key:value)", p)
		}
		out = append(out, AllocOption{Key: strings.TrimSpace(k), Value: strings.TrimSpace(v)})
	}
	return out, nil
}

// allocKeys are the options torch's caching allocator accepts (through 2.9).
// torch stops at the first CUDA allocation with "Unrecognized key" for any
// other.
var allocKeys = map[string]string{
	"max_split_size_mb":                 "native",
	"max_non_split_rounding_mb":         "native",
	"roundup_power2_divisions":          "native",
	"garbage_collection_threshold":      "native",
	"expandable_segments":               "native",
	"release_lock_on_cudamalloc":        "native",
	"per_process_memory_fraction":       "native",
	"graph_capture_record_stream_reuse": "native",
	"backend":                           "any",
	"pinned_use_cuda_host_register":     "host",
	"pinned_num_register_threads":       "host",
	"pinned_use_background_threads":     "host",
	"pinned_reserve_segment_size_mb":    "host",
	"pinned_use_host_register":          "host",
}

// AllocProblem is one thing wrong with an allocator config.
type AllocProblem struct {
	Fatal bool   // torch refuses the config: the job dies at its first allocation
	Text  string // what is wrong
	Fix   string
}

// AllocProblems checks parsed options for values torch rejects and for
// combinations that silently do nothing.
func AllocProblems(opts []AllocOption) []AllocProblem {
	var ps []AllocProblem
	bad := func(format string, a ...any) {
		ps = append(ps, AllocProblem{Fatal: true, Text: fmt.Sprintf(format, a...)})
	}
	has := map[string]string{}
	for _, o := range opts {
		has[o.Key] = o.Value
		if _, known := allocKeys[o.Key]; !known {
			bad("unknown option %q: torch raises \"Unrecognized key\" at the first CUDA allocation", o.Key)
			continue
		}
		switch o.Key {
		case "max_split_size_mb", "max_non_split_rounding_mb", "pinned_reserve_segment_size_mb":
			n, err := strconv.ParseFloat(o.Value, 64)
			switch {
			case err != nil:
				bad("%s:%s is not a number of MiB", o.Key, o.Value)
			case o.Key == "max_split_size_mb" && n <= 20:
				bad("max_split_size_mb:%s must be more than 20 (MiB)", o.Value)
			}
		case "garbage_collection_threshold", "per_process_memory_fraction":
			x, err := strconv.ParseFloat(o.Value, 64)
			if err != nil || x <= 0 || x >= 1 && o.Key == "garbage_collection_threshold" || x > 1 {
				bad("%s:%s must be a fraction between 0 and 1", o.Key, o.Value)
			}
		case "expandable_segments", "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
			"pinned_use_background_threads", "graph_capture_record_stream_reuse", "pinned_use_host_register":
			if o.Value != "True" && o.Value != "False" {
				bad("%s:%s must be True or False (capitalised)", o.Key, o.Value)
			}
		case "backend":
			if o.Value != "native" && o.Value != "cudaMallocAsync" {
				bad("backend:%s must be native or cudaMallocAsync", o.Value)
			}
		case "roundup_power2_divisions":
			if !strings.HasPrefix(o.Value, "[") {
				n, err := strconv.Atoi(o.Value)
				if err != nil || n <= 0 || n&(n-1) != 0 {
					bad("roundup_power2_divisions:%s must be a power of 2", o.Value)
				}
			}
		case "pinned_num_register_threads":
			n, err := strconv.Atoi(o.Value)
			if err != nil || n <= 0 || n&(n-1) != 0 {
				bad("pinned_num_register_threads:%s must be a power of 2", o.Value)
			}
		}
	}
	if len(ps) > 0 {
		return ps
	}
	if _, gc := has["garbage_collection_threshold"]; gc {
		if _, frac := has["per_process_memory_fraction"]; !frac {
			ps = append(ps, AllocProblem{
				Text: "garbage_collection_threshold does nothing without a memory fraction (it is a fraction of the per-process limit)",
				Fix:  "add per_process_memory_fraction:0.9 (torch >= 2.8) or call torch.cuda.set_per_process_memory_fraction() in the program, or drop the option",
			})
		}
	}
	if has["expandable_segments"] == "True" {
		if _, ok := has["max_split_size_mb"]; ok {
			ps = append(ps, AllocProblem{
				Text: "max_split_size_mb has no effect with expandable_segments:True (segments grow instead of splitting)",
				Fix:  "drop max_split_size_mb",
			})
		}
	}
	if has["backend"] == "cudaMallocAsync" {
		var ignored []string
		for k := range has {
			if allocKeys[k] == "native" {
				ignored = append(ignored, k)
			}
		}
		sort.Strings(ignored)
		if len(ignored) > 0 {
			ps = append(ps, AllocProblem{
				Text: fmt.Sprintf("backend:cudaMallocAsync ignores the caching allocator's options (%s)", strings.Join(ignored, ", ")),
				Fix:  "drop them, or use backend:native",
			})
		}
	}
	return ps
}
