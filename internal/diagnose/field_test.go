package diagnose_test

import (
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/diagnose/field"
)

// TestFieldCorpus classifies every message of the field corpus
// (testdata/field: messages users posted in public issue threads) and checks
// the verdict the corpus records for it. e2e/field_test.go replays the same
// messages through a real process under `vramguard run`.
func TestFieldCorpus(t *testing.T) {
	cases, err := field.Load("testdata/field")
	if err != nil {
		t.Fatal(err)
	}
	classes := map[string]int{}
	for _, c := range cases {
		classes[c.Class]++
		t.Run(c.Name, func(t *testing.T) {
			v := diagnose.Classify(c.Input())
			for _, p := range c.CheckVerdict(v) {
				t.Errorf("%s\n  (%s)", p, c.URL)
			}
			if v.Reason != diagnose.Success && len(v.Advice) == 0 {
				t.Error("no advice")
			}
		})
	}
	// the corpus's promise (issue #19): at least 60 messages of at least 8 kinds
	if len(cases) < 60 || len(classes) < 8 {
		t.Errorf("%d messages in %d classes, want at least 60 in 8: %v", len(cases), len(classes), classes)
	}
	urls := map[string]bool{}
	for _, c := range cases {
		urls[c.URL] = true
	}
	t.Logf("%d messages, %d classes, %d distinct threads", len(cases), len(classes), len(urls))
}

// TestFieldCorpusOOMNumbersAreChecked guards the corpus checker itself: a
// number off by more than its rounding, or one the message lacks, fails.
func TestFieldCorpusOOMNumbersAreChecked(t *testing.T) {
	c, err := field.Parse("x", []byte(strings.Join([]string{
		"url: https://github.com/example/example/issues/1", "class: test", "reason: cuda_oom",
		"oom.backend: cuda", "oom.tried: 20.00 MiB", "oom.reserved: 1.00 GiB + 5.00 MiB",
		"--8<-- stderr", "x"}, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	u := func(v uint64) *uint64 { return &v }
	ok := diagnose.OOM{Backend: "cuda", TriedBytes: u(20<<20 + 5000), ReservedBytes: u(1<<30 + 5<<20)}
	if bad := c.CheckOOM(&ok); len(bad) != 0 {
		t.Errorf("within rounding, yet %q", bad)
	}
	off := ok
	off.TriedBytes = u(20<<20 + 6000) // 20.0057 MiB rounds to 20.01
	if bad := c.CheckOOM(&off); len(bad) != 1 {
		t.Errorf("off by more than the rounding, yet %q", bad)
	}
	extra := ok
	extra.FreeBytes = u(1)
	if bad := c.CheckOOM(&extra); len(bad) != 1 {
		t.Errorf("a number the message lacks, yet %q", bad)
	}
	hip := ok
	hip.Backend = "hip"
	if bad := c.CheckOOM(&hip); len(bad) != 1 {
		t.Errorf("wrong backend, yet %q", bad)
	}
}
