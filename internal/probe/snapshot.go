package probe

import (
	"github.com/vramguard/vramguard/internal/postmortem"
	"github.com/vramguard/vramguard/internal/snapshot"
)

// Site is one place in Python code that holds live CUDA memory at the OOM.
type Site = postmortem.AllocSite

// TopAllocationSites reads a memory snapshot written at an OOM
// (torch.cuda.memory._dump_snapshot; decoded by internal/snapshot without
// executing anything) and returns the n sites holding the most live memory.
// A block's site is the innermost frame that is not inside torch itself, so
// a Linear layer's weight is charged to the model code that built it, not to
// torch/nn/modules/linear.py; when every frame is torch's, the innermost
// Python frame is used. Blocks recorded without a stack count under File "?".
func TopAllocationSites(path string, n int) ([]Site, error) {
	s, err := snapshot.ReadFile(path, snapshot.DefaultLimits, nil)
	if err != nil {
		return nil, err
	}
	sites := s.Sites(-1)
	if n > 0 && len(sites) > n {
		sites = sites[:n]
	}
	out := make([]Site, len(sites))
	for i, st := range sites {
		out[i] = Site{File: st.File, Line: st.Line, Function: st.Function, Bytes: st.Bytes, Blocks: st.Blocks}
	}
	return out, nil
}
