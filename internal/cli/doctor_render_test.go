package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/doctor"
)

// TestDoctorFitsTerminal renders the container fixture's report on
// terminals of 80 and 40 columns: no line is wider than the terminal, and
// nothing of the evidence or the fixes is lost to the wrapping.
func TestDoctorFitsTerminal(t *testing.T) {
	out, errOut, _ := runCLI(t, false, "doctor", "--json", "--root", containerRoot(t), "--python", "/usr/local/bin/python", "--dir", "/workspace/ckpt")
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s%s", err, out, errOut)
	}
	rep.DurationMS = 1200 // the golden screen's, not this run's
	for _, width := range []int{80, 40} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			var b bytes.Buffer
			if err := renderDoctor(&b, &rep, true, width); err != nil {
				t.Fatal(err)
			}
			screen := b.String()
			for _, l := range strings.Split(screen, "\n") {
				if w := cellWidth(l); w > width {
					t.Errorf("line of %d cells on a %d-column terminal: %q", w, width, l)
				}
			}
			flat := strings.Join(strings.Fields(screen), " ")
			for _, c := range rep.Checks {
				for _, s := range []string{c.ID, oneLine(c.Evidence), oneLine(c.Fix)} {
					if !strings.Contains(flat, s) {
						t.Errorf("%s: %q is not on the screen", c.ID, s)
					}
				}
			}
			if width == 80 {
				golden(t, "doctor-80.golden", screen)
			}
		})
	}
}
