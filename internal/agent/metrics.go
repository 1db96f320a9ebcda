package agent

import (
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/vramguard/vramguard/internal/gpu"
	"github.com/vramguard/vramguard/internal/users"
)

// Registry returns a private Prometheus registry with the agent's metrics
// (read from its live state at scrape time, so a job's series vanish with
// it), the Go runtime's and the process's own.
func (a *Agent) Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), &collector{a: a})
	return reg
}

// jobLabels name a job's series. The job's name is "job_name", not "job":
// Prometheus owns "job" (the scrape job) and would rename ours. "user" is
// the job's owner, bounded by MaxUserLabels.
var jobLabels = []string{"job_name", "kind", "container", "pod", "namespace", "notebook", "user"}

// MaxUserLabels bounds the user label's values: the first MaxUserLabels
// users the agent exports keep their names for its whole life; jobs of any
// later user are exported as user="other" (their memory still counts). The
// memory of PIDs /proc does not show is user="unknown" on the per-user
// series.
const MaxUserLabels = 64

// OtherUser is the user label of users past MaxUserLabels.
const OtherUser = "other"

// userLabels hands out the bounded user label values.
type userLabels struct {
	mu   sync.Mutex
	seen map[string]bool
}

// label is name's user label: name while it is among the first
// MaxUserLabels names seen, else OtherUser.
func (u *userLabels) label(name string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.seen == nil {
		u.seen = map[string]bool{}
	}
	if u.seen[name] {
		return name
	}
	if len(u.seen) >= MaxUserLabels {
		return OtherUser
	}
	u.seen[name] = true
	return name
}

// jobGPULabels name a job's series on one GPU: the job's labels and the
// GPU's, as the device series (and dcgm-exporter's) carry them.
var jobGPULabels = append(append([]string{}, jobLabels...), "gpu", "uuid")

// rankLabels name a rank's series: its job across nodes (group), the node
// it runs on (this agent's --node), its rank, and its local rank and world
// size ("" when its environment does not say).
var rankLabels = []string{"group", "node", "rank", "local_rank", "world_size"}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("vramguard_"+name, help, labels, nil)
}

var (
	dBuild      = desc("build_info", "vramguard version and the GPU backend in use.", "version", "backend")
	dDevTotal   = desc("device_memory_total_bytes", "Total memory of a GPU.", "gpu", "uuid", "name")
	dDevUsed    = desc("device_memory_used_bytes", "Memory in use on a GPU.", "gpu", "uuid", "name")
	dDevUtil    = desc("device_utilization_ratio", "SM utilisation of a GPU over the driver's last sample period (0-1).", "gpu", "uuid", "name")
	dJobGPU     = desc("job_gpu_memory_bytes", "GPU memory held by a job's processes on one GPU, as the driver reports it (sum without(gpu, uuid) for the job's total).", jobGPULabels...)
	dJobRSS     = desc("job_rss_bytes", "Host resident memory of a job's process tree.", jobLabels...)
	dJobAlloc   = desc("job_torch_allocated_bytes", "PyTorch allocated memory of a job, from the probe: summed over its processes and their CUDA devices (numbered as each process sees them, so no gpu label).", jobLabels...)
	dJobRes     = desc("job_torch_reserved_bytes", "PyTorch reserved memory of a job, from the probe: summed over its processes and their CUDA devices (numbered as each process sees them, so no gpu label).", jobLabels...)
	dJobDevTot  = desc("job_devices_memory_total_bytes", "Total memory of the GPUs a job holds memory on: the sum of their vramguard_device_memory_total_bytes.", jobLabels...)
	dJobLeak    = desc("job_leak_detected", "1 when the leak detector's verdict for a job is a leak.", jobLabels...)
	dJobLeakAt  = desc("job_leak_start_timestamp_seconds", "When a job's leak began, as the monitor first saw it (Unix seconds); absent without a leak.", jobLabels...)
	dJobETA     = desc("job_oom_eta_seconds", "Forecast time until a job runs out of GPU memory at its current trend; absent when nothing rises.", jobLabels...)
	dJobCkpt    = desc("job_seconds_since_checkpoint", "Seconds since a job's last checkpoint the probe saw.", jobLabels...)
	dJobIdle    = desc("job_idle_seconds", "How long a job holding GPU memory has had its attributed SM utilisation under the idle threshold (serve --idle-threshold); 0 while in use. Idle from --idle-window on.", jobLabels...)
	dJobStart   = desc("job_start_time_seconds", "When the agent first saw a job (Unix seconds); for a supervised run, its current attempt.", jobLabels...)
	dJobInfo    = desc("job_info", "A job's identity: key, root PID, run and pod UID (only here, never on other series).", append(append([]string{}, jobLabels...), "key", "root_pid", "run_id", "pod_uid")...)
	dUserGPU    = desc("user_gpu_memory_bytes", "GPU memory held by one user's jobs on one GPU (user=\"unknown\": PIDs /proc does not show; user=\"other\": users past the label cap).", "user", "gpu", "uuid")
	dUserJobs   = desc("user_jobs", "Jobs the agent watches, by owner.", "user")
	dJobs       = desc("jobs", "Jobs the agent watches: process trees holding GPU memory, and supervised runs with or without it.")
	dVanished   = desc("vanished_memory_bytes", "GPU memory held by PIDs that no longer exist.")
	dDropped    = desc("dropped_process_records", "Scrambled process records the driver returned in the last sample.", "reason")
	dSamples    = desc("samples_total", "Full samples taken.")
	dAge        = desc("sample_age_seconds", "Seconds since the last full sample.")
	dCollDur    = desc("collector_duration_seconds", "How long a collector took: sampler is the last GPU+/proc sample, metrics this scrape.", "collector")
	dCollOK     = desc("collector_success", "1 when a collector's last run succeeded.", "collector")
	dAlerts     = desc("alerts_total", "Alerts raised, by kind.", "kind")
	dWebhookOK  = desc("webhook_deliveries_total", "Alerts delivered to the webhook.")
	dWebhookErr = desc("webhook_failures_total", "Webhook POST attempts that failed.")
	dWebhookDr  = desc("webhook_dropped_total", "Alerts given up on or pushed out of the full queue.")
	dWebhookQ   = desc("webhook_queue_length", "Alerts waiting for the webhook.")
	dProbeMsgs  = desc("probe_messages_total", "Probe messages accepted.")
	dRankGPU    = desc("rank_gpu_memory_bytes", "GPU memory held by one rank of a distributed job on one GPU, as the driver reports it for the rank's processes on this node (sum by (group) across nodes for the job's total: group:vramguard_rank_gpu_memory_bytes:sum).", append(append([]string{}, rankLabels...), "gpu", "uuid")...)
	dRankHost   = desc("rank_host_memory_bytes", "Host resident memory (RSS as /proc/PID/stat counts it, summed over the rank's process and the workers that inherit its environment; a page shared by forked workers counts once per process) of one rank of a distributed job on this node.", rankLabels...)
	dRankAlloc  = desc("rank_torch_allocated_bytes", "PyTorch allocated memory of one rank of a distributed job, from the probe: summed over its processes and CUDA devices; absent when none of them reports.", rankLabels...)
	dRankRes    = desc("rank_torch_reserved_bytes", "PyTorch reserved memory of one rank of a distributed job, from the probe: summed over its processes and CUDA devices; absent when none of them reports.", rankLabels...)
	dProbeRej   = desc("probe_messages_refused_total", "Probe messages refused (about another PID than the sender, or malformed).")
)

type collector struct{ a *Agent }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dBuild, dDevTotal, dDevUsed, dDevUtil, dJobGPU, dJobRSS, dJobAlloc, dJobRes, dJobDevTot,
		dJobLeak, dJobLeakAt, dJobETA, dJobCkpt, dJobIdle, dJobStart, dJobInfo, dUserGPU, dUserJobs, dJobs, dVanished, dDropped, dSamples, dAge, dCollDur, dCollOK,
		dAlerts, dWebhookOK, dWebhookErr, dWebhookDr, dWebhookQ, dProbeMsgs, dProbeRej, dRankGPU, dRankHost, dRankAlloc, dRankRes} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	start := time.Now()
	s := c.a.Snapshot()
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	ctr := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	g(dBuild, 1, c.a.cfg.Version, s.Backend)
	gpuLabel := map[string]string{} // a device's UUID -> its gpu label
	for _, d := range s.Devices {
		idx := deviceLabel(d)
		gpuLabel[d.UUID] = idx
		g(dDevTotal, float64(d.TotalBytes), idx, d.UUID, d.Name)
		g(dDevUsed, float64(d.UsedBytes), idx, d.UUID, d.Name)
		if d.UtilPercent >= 0 {
			g(dDevUtil, float64(d.UtilPercent)/100, idx, d.UUID, d.Name)
		}
	}
	jobs := append([]JobView(nil), s.Jobs...)
	sort.Slice(jobs, func(a, b int) bool {
		if !jobs[a].FirstSeen.Equal(jobs[b].FirstSeen) {
			return jobs[a].FirstSeen.Before(jobs[b].FirstSeen)
		}
		return jobs[a].Key < jobs[b].Key
	})
	seen := map[[7]string]int{}
	type userGPU struct{ user, gpu, uuid string }
	byUser := map[userGPU]uint64{}
	userJobs := map[string]int{}
	for _, j := range jobs {
		user := c.a.users.label(j.Labels.User)
		// Two jobs may look alike (two "python3 train.py" processes); a
		// series must still be unique, so the later one gets a #n suffix.
		name := j.Labels.Job
		id := [7]string{name, j.Labels.Kind, j.Labels.Container, j.Labels.Pod, j.Labels.Namespace, j.Labels.Notebook, user}
		if n := seen[id]; n > 0 {
			name += "#" + strconv.Itoa(n+1)
		}
		seen[id]++
		userJobs[user]++
		l := []string{name, j.Labels.Kind, j.Labels.Container, j.Labels.Pod, j.Labels.Namespace, j.Labels.Notebook, user}
		for _, d := range j.GPUs {
			idx, ok := gpuLabel[d.UUID]
			if !ok {
				idx = strconv.Itoa(d.Index)
			}
			g(dJobGPU, float64(d.Bytes), append(l[:len(l):len(l)], idx, d.UUID)...)
			byUser[userGPU{user, idx, d.UUID}] += d.Bytes
		}
		g(dJobRSS, float64(j.RSSBytes), l...)
		if j.Alloc != nil {
			g(dJobAlloc, float64(*j.Alloc), l...)
		}
		if j.Reserved != nil {
			g(dJobRes, float64(*j.Reserved), l...)
		}
		if j.Limit > 0 {
			g(dJobDevTot, float64(j.Limit), l...)
		}
		leak := 0.0
		if j.Leak {
			leak = 1
		}
		g(dJobLeak, leak, l...)
		if j.LeakStart != nil {
			g(dJobLeakAt, float64(j.LeakStart.UnixMilli())/1000, l...)
		}
		if j.OOMETA != nil {
			g(dJobETA, *j.OOMETA, l...)
		}
		if j.CkptAgeS != nil {
			g(dJobCkpt, *j.CkptAgeS, l...)
		}
		if j.GPUBytes > 0 {
			g(dJobIdle, j.IdleS, l...)
		}
		g(dJobStart, float64(j.FirstSeen.UnixMilli())/1000, l...)
		g(dJobInfo, 1, append(l, j.Key, strconv.Itoa(j.RootPID), j.RunID, j.Labels.PodUID)...)
	}
	for _, r := range s.Ranks {
		l := []string{r.Group, r.Node, strconv.Itoa(r.Rank), rankLabel(r.LocalRank), rankLabel(r.WorldSize)}
		for _, d := range r.GPUs {
			idx, ok := gpuLabel[d.UUID]
			if !ok {
				idx = strconv.Itoa(d.Index)
			}
			g(dRankGPU, float64(d.Bytes), append(l[:len(l):len(l)], idx, d.UUID)...)
		}
		g(dRankHost, float64(r.RSSBytes), l...)
		if r.Alloc != nil {
			g(dRankAlloc, float64(*r.Alloc), l...)
			g(dRankRes, float64(*r.Reserved), l...)
		}
	}
	for _, v := range s.VanishedGPUs {
		idx, ok := gpuLabel[v.UUID]
		if !ok {
			idx = strconv.Itoa(v.Index)
		}
		byUser[userGPU{users.Unknown, idx, v.UUID}] += v.Bytes
	}
	for k, v := range byUser {
		g(dUserGPU, float64(v), k.user, k.gpu, k.uuid)
	}
	for u, n := range userJobs {
		g(dUserJobs, float64(n), u)
	}
	g(dJobs, float64(len(s.Jobs)))
	g(dVanished, float64(s.Vanished))
	g(dDropped, float64(s.Dropped.BadPID), "bad_pid")
	g(dDropped, float64(s.Dropped.OverDevice), "over_device")
	g(dDropped, float64(s.Dropped.UnknownDevice), "unknown_device")
	ctr(dSamples, float64(s.Samples))
	if s.Have {
		g(dAge, c.a.cfg.Now().Sub(s.Time).Seconds())
	}
	ok := 0.0
	if s.Have && (s.LastErr == nil || s.LastErrAt.Before(s.Time)) {
		ok = 1
	}
	g(dCollDur, s.Took.Seconds(), "sampler")
	g(dCollOK, ok, "sampler")
	st := c.a.alerts.Stats()
	for _, k := range []string{EventDied, EventLeak, EventOOMForecast, EventUnsaved, EventIdle, EventReclaim} {
		ctr(dAlerts, float64(st.Raised[k]), k)
	}
	ctr(dWebhookOK, float64(st.Delivered))
	ctr(dWebhookErr, float64(st.Failed))
	ctr(dWebhookDr, float64(st.Dropped))
	g(dWebhookQ, float64(st.Queued))
	ctr(dProbeMsgs, float64(s.ProbeMsgs))
	ctr(dProbeRej, float64(s.ProbeRej))
	g(dCollDur, time.Since(start).Seconds(), "metrics")
	g(dCollOK, 1, "metrics")
}

// deviceLabel is a GPU's gpu label: its index, "INDEX/MIG" for a MIG
// instance.
func deviceLabel(d gpu.Device) string {
	idx := strconv.Itoa(d.Index)
	if d.IsMIG() {
		idx += "/" + strconv.Itoa(d.MIGIndex)
	}
	return idx
}
