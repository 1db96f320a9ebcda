package pickle

import "testing"

// TestCallsListed: every call opcode is listed with its node, also one
// whose result is dropped (POP) and so is not in the value.
func TestCallsListed(t *testing.T) {
	// PROTO 2; GLOBAL m.f; EMPTY_TUPLE; REDUCE; POP; GLOBAL m.C; EMPTY_TUPLE;
	// NEWOBJ; EMPTY_DICT; BUILD; STOP
	p := []byte("\x80\x02cm\nf\n)R0cm\nC\n)\x81}b.")
	res, err := DecodeBytes(p, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Calls) != 2 {
		t.Fatalf("%d calls, want 2", len(res.Calls))
	}
	want := []struct {
		op  string
		off int64
		fn  string
	}{{"REDUCE", 8, "m.f"}, {"NEWOBJ", 16, "m.C"}}
	for i, w := range want {
		c := res.Calls[i]
		g, _ := c.Call.Global()
		if c.Opcode != w.op || c.Offset != w.off || g.String() != w.fn {
			t.Errorf("call %d: %s at %d of %s, want %s at %d of %s", i, c.Opcode, c.Offset, g, w.op, w.off, w.fn)
		}
	}
	if !res.Calls[1].Call.HasState || res.Value != any(res.Calls[1].Call) {
		t.Errorf("the NEWOBJ node is not the value with its BUILD state")
	}
}
