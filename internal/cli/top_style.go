// top's colours and terminal: the load thresholds and their colours, the styles, and
// the renderer and width of the terminal it draws on.

package cli

import (
	"io"
	"os"
	"strconv"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
	"golang.org/x/sys/unix"
)

// Load thresholds, as nvitop draws them: below light a figure is green,
// from heavy on red, yellow between.
const (
	memLight, memHeavy   = 10.0, 80.0 // percent of a device's memory
	utilLight, utilHeavy = 10.0, 75.0 // percent SM utilisation
)

// topLoadColors are the light, moderate and heavy load colours, each with a
// shade for light and one for dark terminal backgrounds.
var topLoadColors = [3]lipgloss.AdaptiveColor{
	{Light: "#00875F", Dark: "#5FD787"},
	{Light: "#AF5F00", Dark: "#FFD75F"},
	{Light: "#D70000", Dark: "#FF5F5F"},
}

// topStyles are top's text styles on one renderer. Without colour
// (NO_COLOR, CLICOLOR=0) the load styles are plain; bold, faint and
// reverse remain, so the cursor still shows.
type topStyles struct {
	bold, dim, cursor, warn lipgloss.Style
	load                    [3]lipgloss.Style
}

func newTopStyles(r *lipgloss.Renderer, color bool) *topStyles {
	st := &topStyles{
		bold:   r.NewStyle().Bold(true),
		dim:    r.NewStyle().Faint(true),
		cursor: r.NewStyle().Reverse(true),
		warn:   r.NewStyle().Bold(true),
	}
	for i := range st.load {
		st.load[i] = r.NewStyle()
		if color {
			st.load[i] = st.load[i].Foreground(topLoadColors[i])
		}
	}
	if color {
		st.warn = st.warn.Foreground(topLoadColors[2])
	}
	return st
}

// loadStyle is the style of a figure at pct percent of its whole.
func (st *topStyles) loadStyle(pct, light, heavy float64) lipgloss.Style {
	switch {
	case pct >= heavy:
		return st.load[2]
	case pct >= light:
		return st.load[1]
	}
	return st.load[0]
}

// topEnv is the environment termenv sees: the command's own, less
// NO_COLOR and CLICOLOR, which top applies to colours only (termenv would
// drop bold and reverse with them).
type topEnv struct{ getenv func(string) string }

func (e topEnv) Environ() []string { return os.Environ() }

func (e topEnv) Getenv(k string) string {
	if k == "NO_COLOR" || k == "CLICOLOR" {
		return ""
	}
	return e.getenv(k)
}

// topRenderer returns a renderer for out, with the terminal's colour
// capability, and whether load colours are wanted (NO_COLOR unset and
// CLICOLOR not 0).
func topRenderer(out io.Writer, getenv func(string) string, opts ...termenv.OutputOption) (*lipgloss.Renderer, bool) {
	r := lipgloss.NewRenderer(out, append([]termenv.OutputOption{termenv.WithEnvironment(topEnv{getenv})}, opts...)...)
	color := getenv("NO_COLOR") == "" && getenv("CLICOLOR") != "0"
	return r, color
}

// topTerminalWidth is the width of out when it is a terminal, else $COLUMNS
// when set; 0 when neither says (no limit).
func topTerminalWidth(out io.Writer, getenv func(string) string) int {
	if f, ok := out.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			return int(ws.Col)
		}
	}
	if n, err := strconv.Atoi(getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 0
}
