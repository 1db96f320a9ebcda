package pickle

import (
	"bytes"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
)

// goesOnCases are operands of an unusual type that CPython's unpickler
// accepts, running what follows them (here builtins.len): a reader that
// stops there would miss what a payload after them does.
var goesOnCases = []struct{ name, in string }{
	{"SETITEM on a list", "\x80\x02]q\x00K\x01aK\x00K\x02s0cbuiltins\nlen\n."},
	{"SETITEMS on a list, negative index", "\x80\x02]q\x00K\x01a(J\xff\xff\xff\xffK\x02u0cbuiltins\nlen\n."},
	{"ADDITEMS on builtins.set()", "\x80\x04cbuiltins\nset\n)R(K\x01\x900cbuiltins\nlen\n."},
	{"REDUCE with a torch.Size", "\x80\x02cbuiltins\nmax\nctorch\nSize\n]q\x00(K\x02K\x03e\x85RR0cbuiltins\nlen\n."},
	{"NEWOBJ_EX with OrderedDict keywords", "\x80\x04cbuiltins\nobject\n)ccollections\nOrderedDict\n)R\x920cbuiltins\nlen\n."},
}

// TestGoesOnAsPython: where CPython's unpickler (with torch imported, as
// torch.load has it) reads past each operand and returns what follows, the
// decoder reads on too, to the same last global.
func TestGoesOnAsPython(t *testing.T) {
	var in bytes.Buffer
	for _, c := range goesOnCases {
		in.WriteString(hex.EncodeToString([]byte(c.in)) + "\n")
	}
	cmd := exec.Command("/usr/bin/python3", "-c", `
import io, pickle, sys, torch, collections
allowed = {("builtins", "len"), ("builtins", "max"), ("builtins", "set"), ("builtins", "tuple"),
           ("builtins", "object"), ("collections", "OrderedDict"), ("torch", "Size")}
class U(pickle.Unpickler):
    def find_class(self, m, n):
        if (m, n) not in allowed:
            raise pickle.UnpicklingError(m + "." + n)
        return super().find_class(m, n)
for l in sys.stdin:
    try:
        print(U(io.BytesIO(bytes.fromhex(l.strip()))).load() is len)
    except Exception as e:
        print("error", type(e).__name__, e)
`)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("/usr/bin/python3: %v", err)
	}
	py := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(py) != len(goesOnCases) {
		t.Fatalf("python answered %q", out)
	}
	for i, c := range goesOnCases {
		if py[i] != "True" {
			t.Errorf("%s: python does not reach builtins.len: %s", c.name, py[i])
			continue
		}
		res, err := DecodeBytes([]byte(c.in), DefaultLimits)
		if err != nil {
			t.Errorf("%s: python goes on, the decoder stops: %v", c.name, err)
			continue
		}
		if g, ok := res.Value.(Global); !ok || g.String() != "builtins.len" {
			t.Errorf("%s: value %v, python's is builtins.len", c.name, res.Value)
		}
	}
}
