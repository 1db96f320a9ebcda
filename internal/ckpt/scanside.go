package ckpt

import (
	"fmt"
	"strings"

	"github.com/vramguard/vramguard/internal/pickle"
)

// plainStateTargets are the callables whose results a BUILD may fill: their
// __setstate__ (or __dict__ update) stores data and does nothing else.
// torch.nn's own modules (Module.__setstate__ updates __dict__) pass too.
var plainStateTargets = map[string]bool{
	"collections.OrderedDict":             true,
	"collections.defaultdict":             true,
	"collections.Counter":                 true,
	"numpy.core.multiarray._reconstruct":  true,
	"numpy._core.multiarray._reconstruct": true,
	"numpy.dtype":                         true,
}

func plainStateTarget(full string, allow map[string]bool) bool {
	if plainStateTargets[full] || allow[full] || strings.HasPrefix(full, "torch.nn.modules.") ||
		strings.HasPrefix(full, "torch.distributed.checkpoint.") {
		return true
	}
	return false
}

// checkSideEffects reports what an allowlisted name can still be made to
// do: a BUILD calls its target's __setstate__ or sets its attributes, so a
// BUILD on a class or function (setattr on the object itself: torch's
// legacy loader writes a .patch file for a module class whose dump_patches
// a BUILD set), on what a persistent id returns (the legacy format's
// module record returns the class itself) or on the result of anything
// but a plain data container is dangerous. A persistent id is handed to
// torch's persistent_load: only its "storage" records are data. The legacy
// format's ("module", cls, file, source) records of whole-model saves make
// torch.load compare cls's source with the saved one (and write a .patch
// file where cls has dump_patches set), so each is a finding unless the
// user's --allow names cls; any other persistent id is dangerous.
func checkSideEffects(pr *pickle.Result, record string, res *ScanResult) {
	hit := func(verdict, global string, off int64, op, why string) {
		res.Hits = append(res.Hits, ScanHit{Global: global, Verdict: verdict, Reason: why, Record: record, Offset: off, Opcode: op})
	}
	for _, b := range pr.Builds {
		switch t := b.Target.(type) {
		case pickle.Global:
			hit(VerdictDangerous, t.String(), b.Offset, "BUILD",
				"BUILD on the class or function itself sets its attributes (torch's legacy loader then writes a .patch file for a module class with dump_patches set)")
		case pickle.PersID:
			hit(VerdictDangerous, "persistent id", b.Offset, "BUILD",
				fmt.Sprintf("BUILD on what persistent_load returns for %s sets its attributes (for torch's legacy module record that is the class itself, and a dump_patches set this way makes torch.load write a .patch file)", describePersID(t.ID)))
		case *pickle.Call:
			g, ok := t.Func.(pickle.Global)
			if pid, isPID := t.Func.(pickle.PersID); isPID {
				// The legacy format's ("module", cls, file, source)
				// record: torch's persistent_load returns cls.
				if tp, isTuple := pid.ID.(pickle.Tuple); isTuple && len(tp) >= 2 && (tp[0] == "module" || string(asBytes(tp[0])) == "module") {
					g, ok = tp[1].(pickle.Global)
				}
			}
			if !ok {
				hit(VerdictDangerous, "<build target>", b.Offset, "BUILD", "BUILD on the result of a call that cannot be resolved without running the pickle")
				continue
			}
			full := g.String()
			if v, _ := Classify(pickle.GlobalRef{Global: g, Resolved: true, Proto: pr.Protocol}, res.allow); v != VerdictSafe {
				continue // the global itself is already a finding
			}
			m, n := resolveGlobal(g.Module, g.Name, pr.Protocol)
			if !plainStateTarget(full, res.allow) && !plainStateTarget(m+"."+n, res.allow) {
				hit(VerdictDangerous, full, b.Offset, "BUILD",
					fmt.Sprintf("BUILD on what %s returns calls its __setstate__ or sets its attributes; only plain data containers and torch.nn modules are filled this way by real saves", full))
			}
		}
	}
	for _, p := range pr.PersIDList {
		kind, cls := persIDKind(p.ID)
		switch {
		case kind == "storage":
		case kind == "module" && cls != nil:
			m, n := resolveGlobal(cls.Module, cls.Name, pr.Protocol)
			if res.allow[cls.String()] || res.allow[m+"."+n] {
				continue // the user vouches for the class
			}
			hit(VerdictUnknown, "persistent id", p.Offset, "PERSID",
				fmt.Sprintf("torch's legacy module record of %s (a whole-model save): torch.load compares the class's source with the one saved and writes a .patch file where dump_patches is set; only storage records are data (--allow %s if you trust it, or re-save the state_dict)", cls, cls))
		default:
			hit(VerdictDangerous, "persistent id", p.Offset, "PERSID",
				fmt.Sprintf("persistent id %s is not one of torch's storage records: what a loader's persistent_load does with it is not known", describePersID(p.ID)))
		}
	}
}

// persIDKind reads a persistent id as torch's persistent_load does: a
// tuple whose first item names the kind ("storage", "module"); cls is a
// module record's class when it is a global.
func persIDKind(id any) (kind string, cls *pickle.Global) {
	t, ok := id.(pickle.Tuple)
	if !ok || len(t) == 0 {
		return "", nil
	}
	switch k := t[0].(type) {
	case string:
		kind = k
	case pickle.Bytes:
		kind = string(k)
	}
	if len(t) > 1 {
		if g, ok := t[1].(pickle.Global); ok {
			cls = &g
		}
	}
	return kind, cls
}

// describePersID names a persistent id for a finding: its kind and, for a
// module record, its class.
func describePersID(id any) string {
	kind, cls := persIDKind(id)
	switch {
	case kind != "" && cls != nil:
		return fmt.Sprintf("a (%q, %s, ...) record", kind, cls)
	case kind != "":
		return fmt.Sprintf("a (%q, ...) record", kind)
	}
	return describeValue(id)
}

func asBytes(v any) pickle.Bytes {
	b, _ := v.(pickle.Bytes)
	return b
}
