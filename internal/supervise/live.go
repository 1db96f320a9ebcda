package supervise

import (
	"github.com/vramguard/vramguard/internal/analyze"
)

// ProbeMemory is implemented by a Hook that knows what PyTorch's allocator
// holds inside the job (the in-process probe); values are summed over the
// job's processes, ok false when nothing was reported yet.
type ProbeMemory interface {
	ProbeMemory() (allocated, reserved, inactiveSplit, allocRetries float64, ok bool)
}

// live runs the online leak detector and OOM forecaster over one attempt's
// samples and turns its reports into alerts, once per episode.
type live struct {
	det *analyze.Detector
	al  *analyze.Alerter
}

func newLive(oomWarningS float64) *live {
	cfg := analyze.DefaultAlerterConfig()
	if oomWarningS > 0 {
		cfg.OOMThresholdS = oomWarningS
	}
	return &live{det: analyze.NewDetector(analyze.DefaultConfig()), al: analyze.NewAlerter(cfg)}
}

// observe feeds one sample; t is seconds since the attempt started. NaN
// marks an absent value.
func (l *live) observe(s analyze.Sample) []analyze.Alert {
	if !l.det.Add(s) {
		return nil
	}
	return l.al.Observe(l.det.Report())
}
