package postmortem

// Where MemStats.PeakRSS comes from (MemStats.PeakSource).
const (
	// PeakKernelMaxRSS: the largest max RSS the kernel accounted to one
	// process of the job (ru_maxrss), above every tree figure sampled.
	PeakKernelMaxRSS = "kernel_max_rss"
	// PeakTreePSS: the highest PSS summed over the job's processes, sampled.
	PeakTreePSS = "tree_pss"
	// PeakTreeRSS: the highest RSS summed over the job's processes, sampled,
	// where smaps_rollup could not be read.
	PeakTreeRSS = "tree_rss"
)

// PeakWhat says in words what PeakRSS is, for the post-mortem's memory line
// and evidence; "" when there is no peak.
func (m MemStats) PeakWhat() string {
	switch m.PeakSource {
	case PeakKernelMaxRSS:
		return "the kernel's max RSS of its largest process"
	case PeakTreePSS:
		return "PSS summed over its processes"
	case PeakTreeRSS:
		return "RSS summed over its processes"
	}
	return ""
}
