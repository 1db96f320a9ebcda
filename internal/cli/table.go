package cli

import (
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"golang.org/x/sys/unix"
)

// termWidth is how many columns a table may use: $COLUMNS when set, else
// the terminal's width when stdout is one, else 0 (no limit: a pipe gets
// every column whole).
func (f *Factory) termWidth() int {
	if n, err := strconv.Atoi(f.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	if !f.IO.IsTTY {
		return 0
	}
	if fh, ok := f.IO.Out.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(fh.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			return int(ws.Col)
		}
	}
	return 0
}

// column is one column of a width-aware table.
type column struct {
	Header string
	// Keep orders the columns for a narrow terminal: the column with the
	// highest Keep is dropped first, then the next, until the rest fit.
	Keep int
	// Min, when set, lets the column narrow down to Min, its values cut
	// with "…"; otherwise it keeps its widest value's width.
	Min int
	// Max, when set, caps the column's width even when there is room.
	Max int
	// Always keeps the column even on a terminal too narrow for it.
	Always bool
	// Right aligns the column's values to the right.
	Right bool
}

const colGap = 2

// cellWidth is how many terminal cells s takes.
func cellWidth(s string) int { return lipgloss.Width(s) }

// truncateCells cuts s to at most n cells, ending in "…" when cut; escape
// sequences in s take no cells and are kept whole.
func truncateCells(s string, n int) string {
	if cellWidth(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	return ansi.Truncate(s, n-1, "") + "…"
}

// layoutColumns decides which columns show and how wide, for a table of
// at most width cells (0: no limit). It returns the width of each column,
// 0 for a column left out.
func layoutColumns(width int, cols []column, rows [][]string) []int {
	natural := make([]int, len(cols))
	for i, c := range cols {
		natural[i] = cellWidth(c.Header)
		for _, r := range rows {
			natural[i] = max(natural[i], cellWidth(r[i]))
		}
		if c.Max > 0 {
			natural[i] = min(natural[i], max(c.Max, cellWidth(c.Header)))
		}
	}
	if width <= 0 {
		return natural
	}
	order := make([]int, len(cols))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return cols[order[a]].Keep < cols[order[b]].Keep })
	least := func(i int) int {
		if cols[i].Min > 0 {
			return min(natural[i], max(cols[i].Min, cellWidth(cols[i].Header)))
		}
		return natural[i]
	}
	widths := make([]int, len(cols))
	used := -colGap
	for _, i := range order {
		if used+colGap+least(i) > width && !cols[i].Always {
			break // this column and every one kept less are dropped
		}
		widths[i] = least(i)
		used += colGap + widths[i]
	}
	// Room left widens the narrowed columns, the most kept first.
	for _, i := range order {
		if widths[i] == 0 || widths[i] >= natural[i] {
			continue
		}
		grow := max(0, min(natural[i]-widths[i], width-used))
		widths[i] += grow
		used += grow
	}
	return widths
}

// renderTable writes a header and rows laid out by layoutColumns; no line
// is longer than width (when it is set).
func renderTable(w io.Writer, width int, cols []column, rows [][]string) error {
	widths := layoutColumns(width, cols, rows)
	last := -1
	for i, wd := range widths {
		if wd > 0 {
			last = i
		}
	}
	line := func(cells []string) string {
		var b strings.Builder
		first := true
		for i, c := range cells {
			if widths[i] == 0 {
				continue
			}
			if !first {
				b.WriteString(strings.Repeat(" ", colGap))
			}
			first = false
			s := truncateCells(c, widths[i])
			pad := strings.Repeat(" ", widths[i]-cellWidth(s))
			switch {
			case cols[i].Right:
				b.WriteString(pad + s)
			case i == last:
				b.WriteString(s)
			default:
				b.WriteString(s + pad)
			}
		}
		return strings.TrimRight(b.String(), " ") + "\n"
	}
	header := make([]string, len(cols))
	for i, c := range cols {
		header[i] = c.Header
	}
	if _, err := io.WriteString(w, line(header)); err != nil {
		return err
	}
	for _, r := range rows {
		if _, err := io.WriteString(w, line(r)); err != nil {
			return err
		}
	}
	return nil
}
