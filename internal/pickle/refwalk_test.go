package pickle

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// refGlobal is one import the reference walker saw.
type refGlobal struct {
	Module, Name string
	Offset       int64
	Resolved     bool
}

// refItem is what the walker keeps of a stack value: whether it is a str
// (and which) or anything else.
type refItem struct {
	isStr bool
	s     string
}

// refWalk is a permissive reference walker, written apart from the
// decoder: it tracks only what STACK_GLOBAL needs (which stack values are
// strings), follows every opcode's stack effect without checking types, and
// collects each GLOBAL, INST and STACK_GLOBAL import and each extension
// code. It shares only the operand-text readers with the decoder (they are
// checked against CPython by TestOperandsAsPython). It stops at the first
// byte it cannot follow and returns where.
func refWalk(b []byte) (globals []refGlobal, stopAt int64) {
	var (
		stack []refItem
		marks []int
		memo  = map[uint64]refItem{}
		pos   int
		other = refItem{}
	)
	fail := func(at int) ([]refGlobal, int64) { return globals, int64(at) }
	need := func(n int) bool { return n >= 0 && pos+n <= len(b) }
	line := func() (string, bool) {
		i := bytes.IndexByte(b[pos:], '\n')
		if i < 0 {
			return "", false
		}
		l := string(b[pos : pos+i])
		pos += i + 1
		return l, true
	}
	le := func(n int) (uint64, bool) {
		if !need(n) {
			return 0, false
		}
		var v uint64
		for i := n - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[pos+i])
		}
		pos += n
		return v, true
	}
	fence := func() int {
		if len(marks) > 0 {
			return marks[len(marks)-1]
		}
		return 0
	}
	pop := func() (refItem, bool) {
		if len(stack) <= fence() {
			return refItem{}, false
		}
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		return v, true
	}
	popMark := func() bool {
		if len(marks) == 0 {
			return false
		}
		stack = stack[:marks[len(marks)-1]]
		marks = marks[:len(marks)-1]
		return true
	}
	// memoKey reads the memo index op carries: a decimal line after PUT
	// and GET, one byte after BINPUT and BINGET, four after LONG_BINPUT
	// and LONG_BINGET.
	memoKey := func(op byte) (uint64, bool) {
		switch op {
		case 'p', 'g':
			l, ok := line()
			if !ok {
				return 0, false
			}
			k, err := parseMemoKey(l)
			return k, err == nil
		case 'q', 'h':
			return le(1)
		default:
			return le(4)
		}
	}
	for {
		at := pos
		if !need(1) {
			return fail(at)
		}
		op := b[pos]
		pos++
		ok := true
		switch op {
		case '.':
			if len(stack) == 0 {
				return fail(at)
			}
			return globals, -1
		case 0x80:
			_, ok = le(1)
		case 0x95:
			_, ok = le(8)
		case '(':
			marks = append(marks, len(stack))
		case '0':
			if len(marks) > 0 && marks[len(marks)-1] == len(stack) {
				marks = marks[:len(marks)-1]
			} else {
				_, ok = pop()
			}
		case '1':
			ok = popMark()
		case '2':
			var v refItem
			if v, ok = pop(); ok {
				stack = append(stack, v, v)
			}
		case 'N', 0x88, 0x89, ')', ']', '}', 0x8f, 0x97:
			stack = append(stack, other)
		case 0x98:
			ok = len(stack) > fence()
		case 'I', 'L', 'F', 'P':
			_, ok = line()
			stack = append(stack, other)
		case 'J', 'K', 'M', 'G':
			// BININT, BININT1, BININT2 and BINFLOAT: a number of fixed width
			_, ok = le(map[byte]int{'J': 4, 'K': 1, 'M': 2, 'G': 8}[op])
			stack = append(stack, other)
		case 0x8a, 0x8b:
			w := 1
			if op == 0x8b {
				w = 4
			}
			var n uint64
			if n, ok = le(w); ok {
				ok = need(int(int32(n))) || (w == 1 && need(int(n)))
				pos += int(n)
			}
			stack = append(stack, other)
		case 'S', 'V':
			var l string
			if l, ok = line(); ok {
				var s string
				var err error
				if op == 'S' {
					s, err = unquoteString(l)
				} else {
					s, err = rawUnicodeUnescape(l)
				}
				ok = err == nil
				stack = append(stack, refItem{true, s})
			}
		case 'T', 'U', 'X', 0x8c, 0x8d, 'B', 'C', 0x8e, 0x96:
			w := map[byte]int{'T': 4, 'U': 1, 'X': 4, 0x8c: 1, 0x8d: 8, 'B': 4, 'C': 1, 0x8e: 8, 0x96: 8}[op]
			var n uint64
			if n, ok = le(w); ok && n <= math.MaxInt32 && need(int(n)) {
				s := string(b[pos : pos+int(n)])
				pos += int(n)
				switch op {
				case 'T', 'U':
					stack = append(stack, refItem{true, latin1([]byte(s))})
				case 'X', 0x8c, 0x8d:
					ok = utf8SurrogatePass([]byte(s)) == nil
					stack = append(stack, refItem{true, s})
				default:
					stack = append(stack, other)
				}
			} else {
				ok = false
			}
		case 't', 'l', 'd', 0x91, 'o':
			ok = popMark()
			stack = append(stack, other)
		case 0x85, 0x86, 0x87:
			for i := 0; i < int(op-0x84) && ok; i++ {
				_, ok = pop()
			}
			stack = append(stack, other)
		case 'a', 'b':
			_, ok = pop()
			ok = ok && len(stack) > fence()
		case 'e', 'u', 0x90:
			ok = popMark() && len(stack) > fence()
		case 's':
			_, ok = pop()
			if ok {
				_, ok = pop()
			}
			ok = ok && len(stack) > fence()
		case 'p', 'q', 'r', 0x94:
			k := uint64(len(memo))
			if op != 0x94 {
				k, ok = memoKey(op)
			}
			if ok && len(stack) > fence() {
				memo[k] = stack[len(stack)-1]
			} else {
				ok = false
			}
		case 'g', 'h', 'j':
			var k uint64
			k, ok = memoKey(op)
			if v, found := memo[k]; ok && found {
				stack = append(stack, v)
			} else {
				ok = false
			}
		case 'c', 'i':
			m, ok1 := line()
			n, ok2 := line()
			ok = ok1 && ok2
			if ok && op == 'i' {
				ok = popMark()
			}
			if ok {
				globals = append(globals, refGlobal{m, n, int64(at), true})
			}
			stack = append(stack, other)
		case 0x93:
			n, ok1 := pop()
			m, ok2 := pop()
			ok = ok1 && ok2
			if ok {
				if m.isStr && n.isStr {
					globals = append(globals, refGlobal{m.s, n.s, int64(at), true})
				} else {
					globals = append(globals, refGlobal{"", "", int64(at), false})
				}
			}
			stack = append(stack, other)
		case 0x82, 0x83, 0x84:
			_, ok = le(map[byte]int{0x82: 1, 0x83: 2, 0x84: 4}[op])
			globals = append(globals, refGlobal{"", "", int64(at), false})
			stack = append(stack, other)
		case 'Q':
			_, ok = pop()
			stack = append(stack, other)
		case 'R', 0x81:
			_, ok = pop()
			if ok {
				_, ok = pop()
			}
			stack = append(stack, other)
		case 0x92:
			for i := 0; i < 3 && ok; i++ {
				_, ok = pop()
			}
			stack = append(stack, other)
		default:
			ok = false
		}
		if !ok {
			return fail(at)
		}
	}
}

// agree checks that the decoder reports exactly the imports the reference
// walker sees, up to the point where the decoder stops (from there on the
// scanner reports a failure of its own, so nothing after can pass).
func agree(b []byte) error {
	lim := DefaultLimits
	lim.MaxDepth = math.MaxInt32
	lim.MaxMarks = lim.MaxStack
	res, err := DecodeBytes(b, lim)
	ref, refStop := refWalk(b)
	end := int64(math.MaxInt64)
	if err != nil {
		end = res.ErrAt
	}
	var want []refGlobal
	for _, g := range ref {
		if g.Offset < end {
			want = append(want, g)
		}
	}
	var got []refGlobal
	for _, g := range res.Globals {
		r := refGlobal{g.Module, g.Name, g.Offset, g.Resolved}
		if !g.Resolved {
			r.Module, r.Name = "", ""
		}
		got = append(got, r)
	}
	if refStop >= 0 && refStop < end {
		// The walker gave up first (it is permissive, so the decoder must
		// have failed too, or the input is one the walker does not follow).
		if err == nil {
			return fmt.Errorf("the reference walker stops at byte %d, the decoder reads on to the end", refStop)
		}
		var upTo []refGlobal
		for _, g := range got {
			if g.Offset < refStop {
				upTo = append(upTo, g)
			}
		}
		got = upTo
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("decoder imports %v (error %v), reference walker %v (stops at %d)", got, err, want, refStop)
	}
	return nil
}

func refSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, s := range pyRuleCases {
		seeds = append(seeds, []byte(s))
	}
	files, _ := filepath.Glob("../ckpt/testdata/malicious/*.pkl")
	torch, _ := filepath.Glob("../ckpt/testdata/torch/*.pkl")
	for _, p := range append(files, torch...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	if len(seeds) < len(pyRuleCases)+10 {
		t.Fatalf("only %d seeds: fixtures missing", len(seeds))
	}
	return seeds
}

// TestReferenceWalkerAgrees runs the agreement check over the seeds,
// including every malicious fixture.
func TestReferenceWalkerAgrees(t *testing.T) {
	for _, b := range refSeeds(t) {
		if err := agree(b); err != nil {
			t.Errorf("%q: %v", truncate(string(b)), err)
		}
	}
	// The check can fail: a decoder that missed a global would be caught.
	b := []byte("cos\nsystem\n.")
	ref, _ := refWalk(b)
	if len(ref) != 1 || ref[0].Module != "os" {
		t.Fatalf("walker saw %v", ref)
	}
	if err := agree([]byte("\x80\x04\x8c\x02os\x94\x8c\x06system\x94h\x00h\x01\x93.")); err != nil {
		t.Fatal(err)
	}
}

// FuzzScanAgrees: on any input, the globals the decoder (and so the scan)
// reports are the ones the reference walker sees Python import.
func FuzzScanAgrees(f *testing.F) {
	for _, s := range refSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<16 {
			return
		}
		if err := agree(b); err != nil {
			t.Fatal(err)
		}
	})
}
