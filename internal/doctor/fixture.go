package doctor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/gpu"
)

// FixtureFile is where a fixture tree keeps what a tree of files cannot
// hold: environment variables, statfs answers, the GPU snapshot and the
// torch probe's answer.
const FixtureFile = ".doctor/fixture.json"

// Fixture stands in for the parts of Env that are not files.
type Fixture struct {
	Env    map[string]string `json:"env,omitempty"`
	Cwd    string            `json:"cwd,omitempty"`
	Statfs map[string]FSInfo `json:"statfs,omitempty"`
	// GPU is the NVML snapshot; GPUError "no_driver" means NVML is absent,
	// any other text that NVML failed with it.
	GPU      *GPUSnapshot `json:"gpu,omitempty"`
	GPUError string       `json:"gpu_error,omitempty"`
	// Torch is the probe's answer; TorchError "timeout" means it hung, any
	// other text that the interpreter could not run.
	Torch      *Torch `json:"torch,omitempty"`
	TorchError string `json:"torch_error,omitempty"`
	// WriteError makes the checkpoint-directory write fail with this text;
	// RenameCopies makes rename look like copy-and-delete.
	WriteError   string `json:"write_error,omitempty"`
	RenameCopies bool   `json:"rename_copies,omitempty"`
}

// LoadFixture reads root/.doctor/fixture.json; a tree without one is a
// fixture with no GPU, no Python and an empty environment.
func LoadFixture(root string) (*Fixture, error) {
	fx := &Fixture{}
	b, err := os.ReadFile(filepath.Join(root, FixtureFile))
	if errors.Is(err, os.ErrNotExist) {
		return fx, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read fixture: %w", err)
	}
	if err := json.Unmarshal(b, fx); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(root, FixtureFile), err)
	}
	return fx, nil
}

// Build builds an Env over the fixture tree at root, with a fixed clock.
func (fx *Fixture) Build(root string) Env {
	e := Env{
		Root:   root,
		Getenv: func(k string) string { return fx.Env[k] },
		Cwd:    fx.Cwd,
		Now:    func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) },
	}
	if e.Cwd == "" {
		e.Cwd = "/"
	}
	e.Statfs = func(p string) (FSInfo, error) {
		// The answer for p or its nearest listed ancestor, as statfs would
		// answer for any path on that filesystem.
		for d := path.Clean(p); ; d = path.Dir(d) {
			if st, ok := fx.Statfs[d]; ok {
				return st, nil
			}
			if d == "/" {
				return FSInfo{}, fmt.Errorf("statfs %s: %w", p, os.ErrNotExist)
			}
		}
	}
	switch {
	case fx.GPUError == "no_driver":
		e.GPU = StaticGPU{Err: gpu.ErrNoDriver}
	case fx.GPUError != "":
		e.GPU = StaticGPU{Err: errors.New(fx.GPUError)}
	case fx.GPU != nil:
		e.GPU = StaticGPU{Snap: *fx.GPU}
	default:
		e.GPU = StaticGPU{Err: gpu.ErrNoDriver}
	}
	switch {
	case fx.TorchError == "timeout":
		e.Python = StaticPython{Err: ErrProbeTimeout}
	case fx.TorchError != "":
		e.Python = StaticPython{Err: errors.New(fx.TorchError)}
	case fx.Torch != nil:
		t := *fx.Torch
		e.Python = StaticPython{Torch: &t}
	}
	e.TryWrite = func(dir string) (WriteResult, error) {
		if fx.WriteError != "" {
			return WriteResult{}, errors.New(fx.WriteError)
		}
		if _, err := os.Stat(dir); err != nil {
			return WriteResult{}, err
		}
		return WriteResult{RenameKept: !fx.RenameCopies}, nil
	}
	return e
}

// ExtractTxtar writes the files of a txtar archive (the format of
// golang.org/x/tools/txtar: a comment, then "-- name --" lines each
// followed by that file's content) under dir. In a file named cmdline, "^@"
// stands for the NUL separators a text archive cannot hold.
func ExtractTxtar(archive, dir string) error {
	b, err := os.ReadFile(archive)
	if err != nil {
		return err
	}
	var name string
	var body strings.Builder
	flush := func() error {
		if name == "" {
			return nil
		}
		content := body.String()
		body.Reset()
		if filepath.Base(name) == "cmdline" {
			content = strings.ReplaceAll(strings.TrimRight(content, "\n"), "^@", "\x00")
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(content), 0o644)
	}
	for _, line := range strings.SplitAfter(string(b), "\n") {
		t := strings.TrimRight(line, "\n")
		if strings.HasPrefix(t, "-- ") && strings.HasSuffix(t, " --") && len(t) > 6 {
			if err := flush(); err != nil {
				return err
			}
			name = strings.TrimSpace(t[3 : len(t)-3])
			if !filepath.IsLocal(name) {
				return fmt.Errorf("%s: file name %q leaves the tree", archive, name)
			}
			continue
		}
		if name != "" {
			body.WriteString(line)
		}
	}
	return flush()
}
