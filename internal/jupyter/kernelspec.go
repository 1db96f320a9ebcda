package jupyter

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/vramguard/vramguard/internal/lazyre"
)

// Marker is the key under a kernelspec's "metadata" that marks it as
// vramguard's, so uninstall never removes a kernelspec it did not write.
const Marker = "vramguard"

// SystemKernelsDir is where a kernelspec installed for every user goes, as
// `jupyter kernelspec install` without --user does.
const SystemKernelsDir = "/usr/local/share/jupyter/kernels"

// Spec is a kernelspec's kernel.json.
type Spec struct {
	Argv          []string          `json:"argv"`
	DisplayName   string            `json:"display_name"`
	Language      string            `json:"language"`
	InterruptMode string            `json:"interrupt_mode,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	Metadata      map[string]any    `json:"metadata,omitempty"`
}

// SpecOptions describe the kernel vramguard supervises.
type SpecOptions struct {
	// Vramguard is the absolute path of the vramguard binary.
	Vramguard string
	// Home is passed as --home when set (the state directory).
	Home string
	// DisplayName labels the kernel in the front end and names the run.
	DisplayName string
	// Python is the interpreter that runs ipykernel.
	Python string
	// RunFlags are extra `vramguard run` flags (e.g. --memory-limit 8g).
	RunFlags []string
	Version  string
}

// NewSpec builds the kernelspec: the usual ipykernel under
// `vramguard run --kernel`. Interrupts go over the control channel
// (interrupt_mode "message"): a SIGINT for the kernel would reach
// vramguard's supervisor, which stops the job on it.
func NewSpec(o SpecOptions) Spec {
	argv := []string{o.Vramguard}
	if o.Home != "" {
		argv = append(argv, "--home", o.Home)
	}
	argv = append(argv, "run", "--kernel", "--name", o.DisplayName)
	argv = append(argv, o.RunFlags...)
	argv = append(argv, "--", o.Python, "-m", "ipykernel_launcher", "-f", "{connection_file}")
	return Spec{
		Argv: argv, DisplayName: o.DisplayName, Language: "python", InterruptMode: "message",
		Metadata: map[string]any{"debugger": true, Marker: map[string]any{"version": o.Version}},
	}
}

var validName = lazyre.New(`^[a-zA-Z0-9._-]+$`)

// ValidName reports whether name can be a kernelspec directory name, as
// jupyter_client requires.
func ValidName(name string) bool { return validName.MatchString(name) }

// Install writes spec as kernelsDir/name/kernel.json, replacing an earlier
// vramguard kernelspec of that name but never someone else's.
func Install(kernelsDir, name string, spec Spec) (string, error) {
	if !ValidName(name) {
		return "", fmt.Errorf("invalid kernelspec name %q: use letters, digits, '.', '_' and '-'", name)
	}
	dir := filepath.Join(kernelsDir, name)
	if _, err := os.Stat(filepath.Join(dir, "kernel.json")); err == nil {
		if ours, err := IsOurs(dir); err != nil || !ours {
			return "", fmt.Errorf("%s holds a kernelspec vramguard did not write; choose another --name", dir)
		}
	}
	b, err := json.MarshalIndent(spec, "", " ")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	tmp := filepath.Join(dir, ".kernel.json.tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "kernel.json")); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("write %s: %w", dir, err)
	}
	return dir, nil
}

// IsOurs reports whether the kernelspec in dir was written by vramguard.
func IsOurs(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "kernel.json"))
	if err != nil {
		return false, err
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return false, fmt.Errorf("parse %s: %w", filepath.Join(dir, "kernel.json"), err)
	}
	_, ok := s.Metadata[Marker]
	return ok, nil
}

// KernelsDirs are the directories Jupyter looks for kernelspecs in, in its
// order: $JUPYTER_PATH entries, the user's data directory, then
// sys-prefix-style and system directories. extra adds more (a Python's
// sys.prefix share/jupyter/kernels).
func KernelsDirs(env func(string) string, home string, extra ...string) []string {
	var dirs dirList
	add := dirs.add
	for _, p := range filepath.SplitList(env("JUPYTER_PATH")) {
		if p != "" {
			add(filepath.Join(p, "kernels"))
		}
	}
	add(filepath.Join(DataDir(env, home), "kernels"))
	for _, e := range extra {
		add(e)
	}
	add(filepath.Join("/usr", "share", "jupyter", "kernels"))
	add(SystemKernelsDir)
	return dirs
}

// Installed lists vramguard kernelspec directories among dirs; with a name,
// only that one.
func Installed(dirs []string, name string) ([]string, error) {
	var out []string
	var errs []error
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || (name != "" && e.Name() != name) {
				continue
			}
			p := filepath.Join(d, e.Name())
			if ours, err := IsOurs(p); err == nil && ours {
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out, errors.Join(errs...)
}

// Uninstall removes a vramguard kernelspec directory (and nothing that is
// not one).
func Uninstall(dir string) error {
	ours, err := IsOurs(dir)
	if err != nil {
		return err
	}
	if !ours {
		return fmt.Errorf("%s is not a vramguard kernelspec", dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
