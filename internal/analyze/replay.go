package analyze

// Replay feeds samples, in order, to a new detector with cfg and returns its
// report after the last one: the verdict a live monitor that was fed the same
// samples concludes. `vramguard analyze` (a trace CSV or a recorded run) and
// the live monitor's tests go through it, so the two cannot drift apart.
func Replay(samples []Sample, cfg Config) Report {
	d := NewDetector(cfg)
	for _, s := range samples {
		d.Add(s)
	}
	return d.Report()
}
