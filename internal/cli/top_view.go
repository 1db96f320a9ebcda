package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vramguard/vramguard/internal/attrib"
	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/monitor"
	"github.com/vramguard/vramguard/internal/sampler"
	"github.com/vramguard/vramguard/internal/units"
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

func newSnapshot(smp sampler.Reading, note, sortBy, filter string) topSnapshot {
	devs := smp.Devices
	if devs == nil {
		devs = []gpu.Device{}
	}
	snap := topSnapshot{
		Time: smp.Time, Backend: smp.Backend, Note: note, Devices: devs,
		Jobs:     arrangeJobs(smp.Attrib.Jobs, sortBy, filter),
		Vanished: nonNilProcs(smp.Attrib.Vanished), VanishedBytes: smp.Attrib.VanishedBytes,
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

func nonNilProcs(p []gpu.Process) []gpu.Process {
	if p == nil {
		return []gpu.Process{}
	}
	return p
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

// arrangeJobs filters jobs and orders them grouped by owner kind, sorted
// within each group by sortBy. It returns a new slice.
func arrangeJobs(jobs []attrib.Job, sortBy, filter string) []attrib.Job {
	out := make([]attrib.Job, 0, len(jobs))
	for _, j := range jobs {
		if matchJob(j, filter) {
			out = append(out, j)
		}
	}
	sort.SliceStable(out, func(a, b int) bool {
		x, y := out[a], out[b]
		if kx, ky := attrib.KindOrder[x.Kind], attrib.KindOrder[y.Kind]; kx != ky {
			return kx < ky
		}
		switch sortBy {
		case "rss":
			if x.RSSBytes != y.RSSBytes {
				return x.RSSBytes > y.RSSBytes
			}
		case "pid":
			return x.RootPID < y.RootPID
		case "name":
			if x.Name != y.Name {
				return x.Name < y.Name
			}
		default:
			if x.GPUBytes != y.GPUBytes {
				return x.GPUBytes > y.GPUBytes
			}
		}
		return x.RootPID < y.RootPID
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
	hay := []string{j.Name, j.Kind, ownerLabel(j), j.RunID, j.Kernel, j.Context.ContainerID, j.Context.PodUID}
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
	if len(j.Processes) > 0 {
		return fmt.Sprintf("uid %d", j.Processes[0].UID)
	}
	return "process"
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

func allocLabel(j attrib.Job) string {
	if j.AllocatedBytes == nil {
		return "-"
	}
	return units.FormatBytesFixed(*j.AllocatedBytes) + " / " + units.FormatBytesFixed(*j.ReservedBytes)
}

func devicesLabel(d []int) string {
	s := make([]string, len(d))
	for i, x := range d {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

func deviceLabel(d gpu.Device) string {
	if d.IsMIG() {
		return fmt.Sprintf("GPU %d/MIG %d", d.Index, d.MIGIndex)
	}
	return fmt.Sprintf("GPU %d", d.Index)
}

// writeTopTable prints a snapshot for people (top --once without --json).
func writeTopTable(w io.Writer, s topSnapshot) error {
	if len(s.Devices) == 0 && len(s.Jobs) == 0 {
		_, err := fmt.Fprintln(w, "no GPUs")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tNAME\tUSED\tTOTAL\tUTIL")
	for _, d := range s.Devices {
		util := "-"
		if d.UtilPercent >= 0 {
			util = fmt.Sprintf("%d%%", d.UtilPercent)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", deviceLabel(d), d.Name, units.FormatBytesFixed(d.UsedBytes), units.FormatBytesFixed(d.TotalBytes), util)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "KIND\tJOB\tOWNER\tPID\tGPUS\tGPU MEM\tALLOC / RESERVED\tRSS\tPROCS\tFLAGS")
	for _, j := range s.Jobs {
		flags := strings.Join(j.Flags, ",")
		if j.Orphan {
			flags = strings.TrimPrefix(flags+",orphan", ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\n", j.Kind, j.Name, ownerLabel(j), j.RootPID,
			devicesLabel(j.Devices), units.FormatBytesFixed(j.GPUBytes), allocLabel(j), units.FormatBytesFixed(j.RSSBytes), len(j.Processes), flags)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeTopFooter(w, s)
}

func writeTopFooter(w io.Writer, s topSnapshot) error {
	if len(s.Vanished) > 0 {
		fmt.Fprintf(w, "\n%d GPU record(s) holding %s belong to PIDs not in /proc (exited, or in a PID namespace this /proc cannot see)\n",
			len(s.Vanished), units.FormatBytes(s.VanishedBytes))
	}
	if n := s.Dropped.Total(); n > 0 {
		_, err := fmt.Fprintf(w, "%d scrambled driver record(s) dropped (bad PID %d, more than the device %d, unknown device %d)\n",
			n, s.Dropped.BadPID, s.Dropped.OverDevice, s.Dropped.UnknownDevice)
		return err
	}
	return nil
}
