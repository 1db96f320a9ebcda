// top's text: cells of styled parts (shown, never obeyed), and fitting text to a
// width (clip, wrap, pad).

package cli

import (
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/vramguard/vramguard/internal/termsafe"
)

// topPart is a run of text in one style (nil: plain).
type topPart struct {
	s  string
	st *lipgloss.Style
}

// topCell is one cell of the table: text in one or more styles.
type topCell []topPart

// A cell's text is shown, never obeyed: names, command lines and owners
// come from every user's processes (termsafe.Line).
func plainCell(s string) topCell { return topCell{{s: termsafe.Line(s)}} }

func styledCell(s string, st lipgloss.Style) topCell { return topCell{{s: termsafe.Line(s), st: &st}} }

func (c topCell) text() string {
	var b strings.Builder
	for _, p := range c {
		b.WriteString(p.s)
	}
	return b.String()
}

func (c topCell) render(plain bool) string {
	var b strings.Builder
	for _, p := range c {
		if p.st == nil || plain {
			b.WriteString(p.s)
		} else {
			b.WriteString(p.st.Render(p.s))
		}
	}
	return b.String()
}

// fitLine cuts a drawn line to the screen's width (a last resort: the
// layout keeps lines within it down to very narrow terminals).
func (sc *topScreen) fitLine(s string) string {
	if sc.width > 0 && cellWidth(s) > sc.width {
		return ansi.Truncate(s, sc.width-1, "") + "…"
	}
	return s
}

// topWrap breaks s at spaces into lines of at most w cells (a word longer
// than w is broken inside); w <= 0 leaves it whole.
func topWrap(s string, w int) []string {
	if w <= 0 || cellWidth(s) <= w {
		return []string{s}
	}
	var lines []string
	cur := ""
	for _, word := range strings.Split(s, " ") {
		for cellWidth(word) > w {
			if cur != "" {
				lines, cur = append(lines, cur), ""
			}
			head := ansi.Truncate(word, w, "")
			lines = append(lines, head)
			word = word[len(head):]
		}
		switch {
		case cur == "":
			cur = word
		case cellWidth(cur)+1+cellWidth(word) <= w:
			cur += " " + word
		default:
			lines, cur = append(lines, cur), word
		}
	}
	return append(lines, cur)
}

func topPadRight(s string, w int) string {
	if n := w - cellWidth(s); n > 0 {
		return s + strings.Repeat(" ", n)
	}
	return s
}

func topPadLeft(s string, w int) string {
	if n := w - cellWidth(s); n > 0 {
		return strings.Repeat(" ", n) + s
	}
	return s
}
