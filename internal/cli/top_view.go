package cli

import (
	"cmp"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/analyze"
	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/timeline"
)

// topSnapshot is what `top --once --json` prints.
type topSnapshot struct {
	Time    time.Time `json:"time"`
	Backend string    `json:"backend"`
	// Note says why no GPUs are shown (no driver), when that is the case.
	Note          string         `json:"note,omitempty"`
	Devices       []gpu.Device   `json:"devices"`
	Jobs          []attrib.Job   `json:"jobs"`
	Vanished      []gpu.Process  `json:"vanished"`
	VanishedBytes uint64         `json:"vanished_bytes"`
	Dropped       gpu.DropCounts `json:"dropped"`
	Scanned       int            `json:"processes_scanned"`
	TookMS        float64        `json:"sample_ms"`
	// Verdicts holds the monitor's summary of each job, by job key: a
	// supervised run's own monitor's, else the one top keeps for the job
	// (which needs minutes of samples: none under --once).
	Verdicts map[string]monitor.Summary `json:"verdicts"`
}

func newSnapshot(smp sampler.Reading, note, sortBy, filter string, group bool) topSnapshot {
	snap := topSnapshot{
		Time: smp.Time, Backend: smp.Backend, Note: note, Devices: emptyIfNil(smp.Devices),
		Jobs:     arrangeJobs(smp.Attrib.Jobs, sortBy, filter, group),
		Vanished: emptyIfNil(smp.Attrib.Vanished), VanishedBytes: smp.Attrib.VanishedBytes,
		Dropped: smp.Dropped, Scanned: smp.Attrib.Scanned, TookMS: float64(smp.Took.Microseconds()) / 1000,
		Verdicts: map[string]monitor.Summary{},
	}
	for _, j := range snap.Jobs {
		if jd := smp.Judged[j.Key]; jd != nil {
			snap.Verdicts[j.Key] = jd.Summary
		}
	}
	return snap
}

// emptyIfNil is s, or an empty slice when s is nil: JSON shows a list
// with nothing in it as [], never null.
func emptyIfNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

var sortKeys = []string{"gpu", "rss", "pid", "name"}

func validSort(s string) bool {
	for _, k := range sortKeys {
		if k == s {
			return true
		}
	}
	return false
}

// jobLess orders two jobs by sortBy: GPU memory or host RSS, largest first;
// root PID or name, smallest first. Ties go to the lower root PID.
func jobLess(x, y *attrib.Job, sortBy string) bool {
	return sortKey{x.GPUBytes, x.RSSBytes, x.Name, x.RootPID}.less(sortKey{y.GPUBytes, y.RSSBytes, y.Name, y.RootPID}, sortBy)
}

// sortKey is what --sort orders jobs and processes by: GPU memory or host
// RSS, largest first; PID or name, smallest first; ties to the lower PID.
type sortKey struct {
	gpu, rss uint64
	name     string
	pid      int
}

func (x sortKey) less(y sortKey, sortBy string) bool {
	if c := x.compare(y, sortBy); c != 0 {
		return c < 0
	}
	return x.pid < y.pid
}

// compare orders x and y by sortBy alone (no tie-break): negative when x
// comes first, 0 when the key does not tell them apart.
func (x sortKey) compare(y sortKey, sortBy string) int {
	switch sortBy {
	case "rss":
		return cmp.Compare(y.rss, x.rss)
	case "name":
		return cmp.Compare(x.name, y.name)
	case "pid":
		return cmp.Compare(x.pid, y.pid)
	default:
		return cmp.Compare(y.gpu, x.gpu)
	}
}

// arrangeJobs filters jobs and sorts them by sortBy, across all of them.
// With group, jobs of one owner kind stay together, sorted within their
// group, and the groups themselves follow the same key: their total GPU
// memory or RSS, their lowest root PID, or their title. It returns a new
// slice.
func arrangeJobs(jobs []attrib.Job, sortBy, filter string, group bool) []attrib.Job {
	out := make([]attrib.Job, 0, len(jobs))
	for _, j := range jobs {
		if matchJob(j, filter) {
			out = append(out, j)
		}
	}
	// a group's key: its total GPU memory and RSS, its lowest root PID,
	// its title
	groups := map[string]*sortKey{}
	if group {
		for i := range out {
			j := &out[i]
			g := groups[j.Kind]
			if g == nil {
				g = &sortKey{pid: j.RootPID, name: kindTitles[j.Kind]}
				groups[j.Kind] = g
			}
			g.gpu += j.GPUBytes
			g.rss += j.RSSBytes
			g.pid = min(g.pid, j.RootPID)
		}
	}
	sort.SliceStable(out, func(a, b int) bool {
		x, y := &out[a], &out[b]
		if group && x.Kind != y.Kind {
			if c := groups[x.Kind].compare(*groups[y.Kind], sortBy); c != 0 {
				return c < 0
			}
			return attrib.KindOrder[x.Kind] < attrib.KindOrder[y.Kind]
		}
		return jobLess(x, y, sortBy)
	})
	return out
}

// sortProcs returns a job's processes ordered by sortBy (GPU memory, RSS,
// PID, or command name), ties by PID. It returns a new slice.
func sortProcs(ps []attrib.Process, sortBy string) []attrib.Process {
	out := append([]attrib.Process(nil), ps...)
	ranked := false
	for i := range out {
		ranked = ranked || out[i].Rank != nil
	}
	sort.SliceStable(out, func(a, b int) bool {
		x, y := &out[a], &out[b]
		if ranked {
			// a distributed job's processes in rank order: its launcher
			// (no rank) first, each rank's process before its workers
			if rx, ry := procRankOrder(x), procRankOrder(y); rx != ry {
				return rx < ry
			}
			if wx, wy := x.Role == "worker", y.Role == "worker"; wx != wy {
				return wy
			}
		}
		return sortKey{x.GPUBytes, x.RSSBytes, x.Comm, x.PID}.less(sortKey{y.GPUBytes, y.RSSBytes, y.Comm, y.PID}, sortBy)
	})
	return out
}

// matchJob reports whether filter (case-insensitive) appears in the job's
// name, owner, kind, or any of its processes' commands or PIDs.
func matchJob(j attrib.Job, filter string) bool {
	if filter == "" {
		return true
	}
	f := strings.ToLower(filter)
	hay := []string{j.Name, j.Kind, j.User, ownerLabel(j), j.RunID, j.Kernel, j.Context.ContainerID, j.Context.PodUID}
	for _, p := range j.Processes {
		hay = append(hay, p.Comm, strings.Join(p.Cmdline, " "), fmt.Sprint(p.PID))
	}
	for _, h := range hay {
		if strings.Contains(strings.ToLower(h), f) {
			return true
		}
	}
	return false
}

// ownerLabel says who owns a job in a few characters.
func ownerLabel(j attrib.Job) string {
	c := j.Context
	switch j.Kind {
	case attrib.KindRun:
		return "run " + j.RunID
	case attrib.KindNotebook:
		return "kernel " + topShort(j.Kernel, 8)
	case attrib.KindPod:
		return "pod " + c.PodRef() + " " + c.Runtime + " " + topShort(c.ContainerID, 12)
	case attrib.KindContainer:
		return c.Runtime + " " + topShort(c.ContainerID, 12)
	case attrib.KindSlurm:
		s := "slurm job " + c.SlurmJob
		if c.SlurmStep != "" {
			s += "." + c.SlurmStep
		}
		return s
	case attrib.KindService:
		return c.Unit
	}
	return "process" // its owner is the USER column
}

// jobLabel is the JOB column: the job's name, and for a pod whose
// namespace and name the kubelet's pod log directory gives, those first
// (they are what kubectl users know a pod by).
func jobLabel(j attrib.Job) string {
	if j.Kind == attrib.KindPod && j.Context.PodName != "" {
		return j.Context.PodRef() + " (" + j.Name + ")"
	}
	return j.Name
}

// procLabel is the JOB column of one of an expanded job's processes: its
// role, its command name where the command line does not start with it,
// its command line, and its PID inside its container.
func procLabel(p attrib.Process) string {
	cmd := strings.Join(p.Cmdline, " ")
	if cmd == "" {
		cmd = p.Comm
	}
	s := "└ " + p.Role
	if p.Rank != nil {
		s = "└ " + procRankLabel(p)
		if p.Role == "worker" {
			s += " worker"
		}
	}
	if len(p.Cmdline) == 0 || !strings.HasPrefix(topBaseName(p.Cmdline[0]), p.Comm) {
		s += " " + p.Comm
	}
	s += ": " + cmd
	if p.ContainerPID != 0 {
		s += fmt.Sprintf(" (pid %d inside)", p.ContainerPID)
	}
	return s
}

// procRankOrder is where a process sorts among its job's by rank: -1 for
// one with no rank.
func procRankOrder(p *attrib.Process) int {
	if p.Rank == nil {
		return -1
	}
	return *p.Rank
}

// procRankLabel is a process's rank in a child row's label: "rank 1/4"
// (of a world of 4), "rank 1" when the world size is not known.
func procRankLabel(p attrib.Process) string {
	s := "rank " + strconv.Itoa(*p.Rank)
	if p.WorldSize != nil {
		s += "/" + strconv.Itoa(*p.WorldSize)
	}
	return s
}

func topBaseName(s string) string {
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// topCommand is a command line as a shell would take it back.
func topCommand(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

var kindTitles = map[string]string{
	attrib.KindRun: "SUPERVISED RUNS", attrib.KindNotebook: "NOTEBOOKS", attrib.KindPod: "PODS",
	attrib.KindContainer: "CONTAINERS", attrib.KindSlurm: "SLURM JOBS", attrib.KindService: "SERVICES",
	attrib.KindProcess: "PROCESSES",
}

func topShort(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func deviceLabel(d gpu.Device) string {
	if d.IsMIG() {
		return fmt.Sprintf("GPU %d:%d", d.Index, d.MIGIndex)
	}
	return fmt.Sprintf("GPU %d", d.Index)
}

// gpuSlot is one device a process holds memory on: a GPU's index, and the
// MIG instance's index on it (-1 for the whole GPU).
type gpuSlot struct{ index, mig int }

// gpuLabel is the GPU column: the indexes of the GPUs the processes hold
// memory on, a MIG instance as GPU:INSTANCE (7:1), runs of three or more
// whole GPUs as a range (0-3). "-" when they hold none.
func gpuLabel(procs []attrib.Process, devs map[string]gpu.Device) string {
	seen := map[gpuSlot]bool{}
	var slots []gpuSlot
	for _, p := range procs {
		for _, g := range p.GPU {
			s := gpuSlot{g.DeviceIndex, -1}
			if d, ok := devs[g.DeviceUUID]; ok && d.IsMIG() {
				s.mig = d.MIGIndex
			}
			if !seen[s] {
				seen[s] = true
				slots = append(slots, s)
			}
		}
	}
	if len(slots) == 0 {
		return "-"
	}
	sort.Slice(slots, func(a, b int) bool {
		if slots[a].index != slots[b].index {
			return slots[a].index < slots[b].index
		}
		return slots[a].mig < slots[b].mig
	})
	var parts []string
	for i := 0; i < len(slots); {
		s := slots[i]
		if s.mig >= 0 {
			parts = append(parts, fmt.Sprintf("%d:%d", s.index, s.mig))
			i++
			continue
		}
		k := i + 1
		for k < len(slots) && slots[k].mig < 0 && slots[k].index == slots[k-1].index+1 {
			k++
		}
		if k-i >= 3 {
			parts = append(parts, fmt.Sprintf("%d-%d", s.index, slots[k-1].index))
		} else {
			for _, x := range slots[i:k] {
				parts = append(parts, strconv.Itoa(x.index))
			}
		}
		i = k
	}
	return strings.Join(parts, ",")
}

// judgeSpan is the least time the leak detector needs before it can give a
// verdict (MinLevels windows of WindowS); a supervised run whose own
// monitor has raised nothing is still being judged before it.
var judgeSpan = func() time.Duration {
	c := analyze.DefaultConfig()
	return time.Duration(float64(c.MinLevels) * c.WindowS * float64(time.Second))
}()

// Flag words of the FLAGS column.
const (
	flagJudging     = "judging…"
	flagStable      = "stable"
	flagNoLeak      = "no leak"
	flagLeak        = "leak"
	flagHostLeak    = "host leak"
	flagCacheGrowth = "cache growth"
	flagOOMRisk     = "oom-risk"
	flagOrphan      = "orphan"
)

// jobFlags is the FLAGS column: the leak detector's verdict ("judging…"
// until it has enough samples), then oom-risk while an OOM forecast points
// ahead, then orphan.
func jobFlags(j *attrib.Job, smp *sampler.Reading) []string {
	var out []string
	if jd := smp.Judged[j.Key]; jd != nil {
		switch v := jd.Summary.Verdict; v {
		case string(analyze.VerdictInsufficientData):
			out = append(out, flagJudging)
		case string(analyze.VerdictStable):
			out = append(out, flagStable)
		case string(analyze.VerdictLeak):
			if jd.Summary.Series == string(analyze.SeriesRSS) {
				out = append(out, flagHostLeak)
			} else {
				out = append(out, flagLeak)
			}
		case string(analyze.VerdictCacheGrowth):
			out = append(out, flagCacheGrowth)
		case "":
			// a supervised run whose own monitor raised no leak
			if rs := topRunState(smp.Runs, j.RunID); rs != nil && smp.ProcessTime.Sub(rs.AttemptStart) < judgeSpan {
				out = append(out, flagJudging)
			} else {
				out = append(out, flagNoLeak)
			}
		default:
			out = append(out, strings.ReplaceAll(v, "_", " "))
		}
	}
	for _, f := range j.Flags {
		if f != flagLeak {
			out = append(out, f)
		}
	}
	if j.Orphan {
		out = append(out, flagOrphan)
	}
	return out
}

func topRunState(runs []timeline.RunState, id string) *timeline.RunState {
	if id == "" {
		return nil
	}
	for i := range runs {
		if runs[i].ID == id {
			return &runs[i]
		}
	}
	return nil
}
