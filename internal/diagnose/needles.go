package diagnose

import "sync"

// needleSet finds, in one pass over a line, which of many literal strings it
// holds (Aho–Corasick over the bytes that occur in them): the classifier's
// filter before any regular expression runs. Each needle carries a bit mask
// (the signatures it admits); scan returns the union of the masks of the
// needles found.
type needleSet struct {
	class  [256]uint8 // byte → column; 0 for bytes in no needle
	cols   int
	next   []int32  // state*cols+column → state
	output []uint64 // state → masks of the needles ending here (fail links folded in)
}

func newNeedleSet(needles []string, masks []uint64) *needleSet {
	ns := &needleSet{cols: 1}
	for _, n := range needles {
		for i := 0; i < len(n); i++ {
			if ns.class[n[i]] == 0 {
				ns.class[n[i]] = uint8(ns.cols)
				ns.cols++
			}
		}
	}
	// the trie, -1 for no edge
	goTo := [][]int32{make([]int32, ns.cols)}
	for i := range goTo[0] {
		goTo[0][i] = -1
	}
	ns.output = []uint64{0}
	for k, n := range needles {
		s := int32(0)
		for i := 0; i < len(n); i++ {
			c := ns.class[n[i]]
			if goTo[s][c] < 0 {
				row := make([]int32, ns.cols)
				for j := range row {
					row[j] = -1
				}
				goTo = append(goTo, row)
				ns.output = append(ns.output, 0)
				goTo[s][c] = int32(len(goTo) - 1)
			}
			s = goTo[s][c]
		}
		ns.output[s] |= masks[k]
	}
	// breadth-first: fail links, outputs folded, and the full transition table
	fail := make([]int32, len(goTo))
	ns.next = make([]int32, len(goTo)*ns.cols)
	queue := []int32{}
	for c := 0; c < ns.cols; c++ {
		if t := goTo[0][c]; t > 0 {
			fail[t] = 0
			ns.next[c] = t
			queue = append(queue, t)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		ns.output[s] |= ns.output[fail[s]]
		for c := 0; c < ns.cols; c++ {
			t := goTo[s][c]
			if t < 0 {
				ns.next[int(s)*ns.cols+c] = ns.next[int(fail[s])*ns.cols+c]
				continue
			}
			fail[t] = ns.next[int(fail[s])*ns.cols+c]
			ns.next[int(s)*ns.cols+c] = t
			queue = append(queue, t)
		}
	}
	return ns
}

// scan returns the union of the masks of the needles s holds.
func (ns *needleSet) scan(s string) uint64 {
	var m uint64
	state := int32(0)
	for i := 0; i < len(s); i++ {
		state = ns.next[int(state)*ns.cols+int(ns.class[s[i]])]
		m |= ns.output[state]
	}
	return m
}

var (
	sigNeedlesOnce sync.Once
	sigNeedles     *needleSet
	sigAlways      uint64 // signatures without needles: always tried
)

// signatureNeedles builds the filter of lineSigs once: bit k of a line's
// mask is set when the line holds one of signature k's needles.
func signatureNeedles() (*needleSet, uint64) {
	sigNeedlesOnce.Do(func() {
		if len(lineSigs) > 64 {
			panic("diagnose: more than 64 line signatures")
		}
		var needles []string
		var masks []uint64
		for k, s := range lineSigs {
			if s.needles == nil {
				sigAlways |= 1 << k
			}
			for _, n := range s.needles {
				needles = append(needles, n)
				masks = append(masks, 1<<k)
			}
		}
		sigNeedles = newNeedleSet(needles, masks)
	})
	return sigNeedles, sigAlways
}
