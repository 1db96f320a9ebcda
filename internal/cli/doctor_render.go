package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/vramguard/vramguard/internal/doctor"
)

var doctorSymbol = map[doctor.Status]string{
	doctor.OK:   "✓",
	doctor.Warn: "!",
	doctor.Fail: "✗",
	doctor.NA:   "-",
}

// doctorMinText is the narrowest the evidence column gets; on a terminal
// narrower than that leaves, the text goes below the check, indented.
const doctorMinText = 30

// renderDoctor prints the report: for people on a terminal, a table whose
// evidence, and the fix below it, wrap within width cells (0: no limit);
// for pipes, one tab-separated line per check (status, id, evidence, fix).
func renderDoctor(w io.Writer, rep *doctor.Report, tty bool, width int) error {
	if !tty {
		for _, c := range rep.Checks {
			if _, err := fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", c.Status, c.ID, oneLine(c.Evidence), oneLine(c.Fix)); err != nil {
				return err
			}
		}
		return nil
	}
	statusW := 0
	idW := len("CHECK")
	for _, c := range rep.Checks {
		statusW = max(statusW, cellWidth(doctorSymbol[c.Status]+" "+string(c.Status)))
		idW = max(idW, cellWidth(c.ID))
	}
	indent := statusW + colGap + idW + colGap
	textW := 0 // no wrapping
	below := false
	if width > 0 {
		textW = width - indent
		if textW < doctorMinText {
			// Too narrow for a column: the text goes on lines of its own.
			below, indent, textW = true, 4, max(width-4, 10)
		}
	}
	var b strings.Builder
	pad := func(s string, n int) string { return s + strings.Repeat(" ", max(0, n-cellWidth(s))) }
	head := pad("", statusW) + strings.Repeat(" ", colGap) + pad("CHECK", idW) + strings.Repeat(" ", colGap) + "EVIDENCE, then FIX"
	if below {
		head = pad("", statusW) + strings.Repeat(" ", colGap) + "CHECK: EVIDENCE, then FIX"
	}
	b.WriteString(strings.TrimRight(head, " ") + "\n")
	for _, c := range rep.Checks {
		lines := wrapWords(oneLine(c.Evidence), textW)
		if c.Fix != "" {
			lines = append(lines, wrapWords("fix: "+oneLine(c.Fix), textW)...)
		}
		b.WriteString(pad(doctorSymbol[c.Status]+" "+string(c.Status), statusW) + strings.Repeat(" ", colGap))
		if below {
			b.WriteString(c.ID + "\n")
		} else {
			b.WriteString(pad(c.ID, idW) + strings.Repeat(" ", colGap) + lines[0] + "\n")
			lines = lines[1:]
		}
		for _, l := range lines {
			b.WriteString(strings.Repeat(" ", indent) + l + "\n")
		}
	}
	s := rep.Summary
	fmt.Fprintf(&b, "\n%d ok, %d warn, %d fail, %d n/a in %.1f s\n", s.OK, s.Warn, s.Fail, s.NA, float64(rep.DurationMS)/1000)
	_, err := io.WriteString(w, b.String())
	return err
}

// wrapWords breaks s into lines of at most width cells at spaces (a word
// longer than a line is cut); width 0 keeps s whole. It returns at least
// one line.
func wrapWords(s string, width int) []string {
	if width <= 0 || cellWidth(s) <= width {
		return []string{s}
	}
	var lines []string
	var cur strings.Builder
	curW := 0
	for _, word := range strings.Fields(s) {
		ww := cellWidth(word)
		for ww > width { // a word longer than a line: cut it
			if curW > 0 {
				lines = append(lines, cur.String())
				cur.Reset()
				curW = 0
			}
			head := truncateCells(word, width+1) // width cells, without the "…"
			head = strings.TrimSuffix(head, "…")
			lines = append(lines, head)
			word = word[len(head):]
			ww = cellWidth(word)
		}
		if curW > 0 && curW+1+ww > width {
			lines = append(lines, cur.String())
			cur.Reset()
			curW = 0
		}
		if curW > 0 {
			cur.WriteByte(' ')
			curW++
		}
		cur.WriteString(word)
		curW += ww
	}
	if curW > 0 || len(lines) == 0 {
		lines = append(lines, cur.String())
	}
	return lines
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
