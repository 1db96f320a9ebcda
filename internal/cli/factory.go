package cli

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// IOStreams is where commands read and write. IsTTY says whether Out is a
// terminal, so commands print tables to people and plain lines to pipes.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	IsTTY  bool
}

// Factory carries what every command needs and tests replace.
type Factory struct {
	IO       IOStreams
	Now      func() time.Time
	Getenv   func(string) string
	HomeFlag string
	Verbose  bool
	// NoticeEvery is how often a running `vramguard run` asks the shared
	// agent for this user's notices (0: noticeEvery).
	NoticeEvery time.Duration
	// NetFS names the network file system that holds a path ("" for a
	// local one); nil: groups.NetworkFS.
	NetFS func(path string) string
}

// NewFactory returns a Factory wired to the real process.
func NewFactory() *Factory {
	return &Factory{
		IO: IOStreams{
			In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr,
			IsTTY: isTerminal(os.Stdout.Fd()),
		},
		Now:    time.Now,
		Getenv: os.Getenv,
	}
}

// StateDir is the state directory: --home, $VRAMGUARD_HOME, or
// ~/.local/state/vramguard ($XDG_STATE_HOME/vramguard when set).
func (f *Factory) StateDir() string {
	if f.HomeFlag != "" {
		return f.HomeFlag
	}
	if h := f.Getenv("VRAMGUARD_HOME"); h != "" {
		return h
	}
	if x := f.Getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "vramguard")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".local", "state", "vramguard")
}

// Logger logs diagnostics to stderr; quiet unless --verbose.
func (f *Factory) Logger() *slog.Logger {
	level := slog.LevelWarn
	if f.Verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(f.IO.ErrOut, &slog.HandlerOptions{Level: level}))
}

// WriteJSON prints v as indented JSON on stdout.
func (f *Factory) WriteJSON(v any) error {
	enc := json.NewEncoder(f.IO.Out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func ioctlGetTermios(fd int) (*unix.Termios, error) {
	return unix.IoctlGetTermios(fd, unix.TCGETS)
}
