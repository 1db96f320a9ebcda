package ckpt

// confirmNewest gives the newest checkpoint of each group (all entries
// when group returns one key) the full check (Options.Deep: the CRC of
// every record, every byte range) and demotes one that fails it to
// KindInvalid with the reason, then tries the next newest of that group,
// until one passes or none is left. Only those candidates are read whole,
// so latest and prune stay fast. It returns how many were demoted.
//
// The structural check alone passes a checkpoint whose tensor bytes were
// damaged after the save (a flipped bit on disk, a copy that went wrong in
// the middle); torch.load then loads the damaged weights without a word,
// so latest must not pick it and prune must not keep it as the only one.
func confirmNewest(es []Entry, group func(*Entry) string) int {
	demoted := 0
	checked := map[string]bool{}
	for {
		newest := map[string]int{}
		for i := range es {
			e := &es[i]
			if e.Kind != KindCheckpoint {
				continue
			}
			g := group(e)
			if j, ok := newest[g]; !ok || Newer(e, &es[j]) {
				newest[g] = i
			}
		}
		again := false
		for _, i := range newest {
			e := &es[i]
			if checked[e.Path] {
				continue
			}
			checked[e.Path] = true
			rep, err := Inspect(e.Path, Options{Deep: true, Structure: true})
			reason := ""
			switch {
			case err != nil:
				reason = "full check: " + err.Error()
			case !rep.Valid:
				reason = "full check: " + rep.Reason
			}
			if reason != "" {
				e.Kind, e.Valid, e.Reason = KindInvalid, false, reason
				demoted++
				again = true
			}
		}
		if !again {
			return demoted
		}
	}
}
