package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/vramguard/vramguard/internal/doctor"
)

var doctorSymbol = map[doctor.Status]string{
	doctor.OK:   "✓",
	doctor.Warn: "!",
	doctor.Fail: "✗",
	doctor.NA:   "-",
}

// renderDoctor prints the report: an aligned table for people on a
// terminal, one tab-separated line per check (status, id, evidence, fix)
// for pipes.
func renderDoctor(w io.Writer, rep *doctor.Report, tty bool) error {
	if !tty {
		for _, c := range rep.Checks {
			if _, err := fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", c.Status, c.ID, oneLine(c.Evidence), oneLine(c.Fix)); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tCHECK\tEVIDENCE\tFIX")
	for _, c := range rep.Checks {
		fix := c.Fix
		if fix == "" {
			fix = "-"
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%s\t%s\n", doctorSymbol[c.Status], c.Status, c.ID, oneLine(c.Evidence), oneLine(fix))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := rep.Summary
	_, err := fmt.Fprintf(w, "\n%d ok, %d warn, %d fail, %d n/a in %.1f s\n", s.OK, s.Warn, s.Fail, s.NA, float64(rep.DurationMS)/1000)
	return err
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
