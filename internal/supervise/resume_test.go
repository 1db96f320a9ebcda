package supervise

import (
	"strings"
	"testing"
)

// TestResumeArg: {resume} carries a plain path as ./NAME when relative (it
// never starts with '-') and refuses every other name with its reason.
func TestResumeArg(t *testing.T) {
	for _, c := range []struct {
		in, want, why string
	}{
		{"", "", ""},
		{"ckpts/epoch=3-step=100.ckpt", "./ckpts/epoch=3-step=100.ckpt", ""},
		{"--use-compress-program=sh.pt", "./--use-compress-program=sh.pt", ""},
		{"-rf", "./-rf", ""},
		{"/abs/ck+1.pt", "/abs/ck+1.pt", ""},
		{"./ck.pt", "./ck.pt", ""},
		{"../up/ck.pt", "../up/ck.pt", ""},
		{"ck;touch x;.pt", "", `holds ';'`},
		{"my ckpts/a.pt", "", "white space"},
		{"ck$(id).pt", "", `holds '$'`},
		{"ck'.pt", "", `holds '\''`},
		{"ck\n.pt", "", "white space"},
		{"ck\x1b.pt", "", "control character"},
		{"épreuve.pt", "", "outside ASCII"},
		{"host:ck.pt", "", `holds ':'`},
		{"ck*.pt", "", `holds '*'`},
	} {
		got, err := ResumeArg(c.in)
		switch {
		case c.why == "" && (err != nil || got != c.want):
			t.Errorf("ResumeArg(%q) = %q, %v; want %q", c.in, got, err, c.want)
		case c.why != "" && (err == nil || !IsUnsafeResume(err) || !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), "VRAMGUARD_RESUME")):
			t.Errorf("ResumeArg(%q) = %q, %v; want a refusal saying %s and pointing to $VRAMGUARD_RESUME", c.in, got, err, c.why)
		}
	}
}
