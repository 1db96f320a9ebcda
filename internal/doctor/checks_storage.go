package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/vramguard/vramguard/internal/units"
)

// WriteResult is what writing a temporary file in the checkpoint directory
// showed.
type WriteResult struct {
	// RenameKept is true when rename(2) kept the file's inode: a real,
	// atomic rename. FUSE object-store mounts emulate rename by copy and
	// delete, so a crash mid-save leaves a partial checkpoint.
	RenameKept bool
}

// TryWriteDir writes a small temporary file in dir, syncs it, renames it
// within dir and removes it: what a careful checkpoint writer does.
func TryWriteDir(dir string) (WriteResult, error) {
	var r WriteResult
	tmp, err := os.CreateTemp(dir, ".vramguard-doctor-*.tmp")
	if err != nil {
		return r, err
	}
	name := tmp.Name()
	defer os.Remove(name)
	_, werr := tmp.Write(make([]byte, 4096))
	serr := tmp.Sync()
	cerr := tmp.Close()
	for _, e := range []error{werr, serr, cerr} {
		if e != nil {
			return r, e
		}
	}
	before, err := os.Stat(name)
	if err != nil {
		return r, err
	}
	final := strings.TrimSuffix(name, ".tmp") + ".done"
	if err := os.Rename(name, final); err != nil {
		return r, fmt.Errorf("rename within %s: %w", dir, err)
	}
	defer os.Remove(final)
	after, err := os.Stat(final)
	if err != nil {
		return r, err
	}
	bs, ok1 := before.Sys().(*syscall.Stat_t)
	as, ok2 := after.Sys().(*syscall.Stat_t)
	r.RenameKept = ok1 && ok2 && bs.Ino == as.Ino && bs.Dev == as.Dev
	if err := os.Remove(final); err != nil {
		return r, fmt.Errorf("remove %s: %w", final, err)
	}
	return r, nil
}

var noDir = "no --dir given"

const dirFix = "pass --dir CHECKPOINT_DIR to check where the job saves checkpoints"

// dirMount finds the mount holding the checkpoint directory, following
// symlinks inside Root.
func dirMount(f *facts) (Mount, string, bool) {
	logical := f.opts.Dir
	if real, err := filepath.EvalSymlinks(f.env.path(logical)); err == nil {
		if f.env.Root != "" {
			if rel, err := filepath.Rel(f.env.Root, real); err == nil && !strings.HasPrefix(rel, "..") {
				logical = "/" + rel
			}
		} else {
			logical = real
		}
	}
	m, ok := mountFor(f.mounts, logical)
	return m, logical, ok
}

// noDirR is the result of a check of the checkpoint directory when none
// is named: not applicable, with the fix that names one.
func noDirR() Result {
	r := naR(noDir)
	r.Fix = dirFix
	return r
}

func checkEphemeral(f *facts) Result {
	if f.opts.Dir == "" {
		return noDirR()
	}
	dir := f.opts.Dir
	fstype, where := "", ""
	if m, _, ok := dirMount(f); ok {
		fstype, where = m.FSType, fmt.Sprintf("%s mounted at %s", m.Source, m.MountPoint)
	} else if f.env.Statfs != nil {
		if st, err := f.env.Statfs(dir); err == nil {
			fstype = st.Type
		}
	}
	if fstype == "" {
		return warnR(dir+": cannot tell which filesystem holds it", "check with df -T "+dir)
	}
	ev := fmt.Sprintf("%s is on %s (%s)", dir, fstype, where)
	r := okR(ev)
	switch {
	case fstype == "tmpfs" || fstype == "ramfs":
		r = failR(ev+": checkpoints live in RAM, count against the memory limit and vanish at reboot or when the container stops",
			"write checkpoints to a disk or a mounted volume (docker run -v /data/ckpt:"+dir+")")
	case isOverlay(fstype):
		what := "the container's writable layer"
		if !f.container.Inside {
			what = "an overlay filesystem"
		}
		r = warnR(fmt.Sprintf("%s is on %s (%s): checkpoints vanish with the container", dir, what, fstype),
			"mount a volume there: docker run -v /data/ckpt:"+dir+" (Kubernetes: a PersistentVolumeClaim)")
	}
	return r.with("fstype", fstype)
}

// ckptExts are the file endings of checkpoints vramguard recognises.
var ckptExts = []string{".pt", ".pth", ".ckpt", ".safetensors", ".bin", ".pkl", ".tar", ".distcp", ".npz", ".h5"}

func isCkptFile(name string) bool {
	for _, e := range ckptExts {
		if strings.HasSuffix(name, e) {
			return true
		}
	}
	return false
}

// Checkpoint is one checkpoint in the directory: a file, or a directory of
// shards (Hugging Face's checkpoint-N/, torch.distributed.checkpoint).
type Checkpoint struct {
	Name  string
	Bytes uint64
	Mod   time.Time
}

// findCheckpoints lists the top-level checkpoints in dir (a rooted path).
func findCheckpoints(dir string) ([]Checkpoint, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Checkpoint
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || strings.HasPrefix(e.Name(), ".vramguard-doctor-") {
			continue
		}
		if info.Mode().IsRegular() && isCkptFile(e.Name()) {
			out = append(out, Checkpoint{e.Name(), uint64(info.Size()), info.ModTime()})
			continue
		}
		if !e.IsDir() {
			continue
		}
		var size uint64
		shards := 0
		newest := info.ModTime()
		_ = filepath.WalkDir(filepath.Join(dir, e.Name()), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if fi, err := d.Info(); err == nil && fi.Mode().IsRegular() {
				size += uint64(fi.Size())
				if isCkptFile(d.Name()) {
					shards++
				}
				if fi.ModTime().After(newest) {
					newest = fi.ModTime()
				}
			}
			return nil
		})
		if shards > 0 {
			out = append(out, Checkpoint{e.Name() + "/", size, newest})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Mod.After(out[j].Mod) })
	return out, nil
}

func checkSpace(f *facts) Result {
	if f.opts.Dir == "" {
		return noDirR()
	}
	dir := f.opts.Dir
	if f.env.Statfs == nil {
		return naR("no statfs")
	}
	st, err := f.env.Statfs(dir)
	if err != nil {
		return failR(fmt.Sprintf("statfs %s: %v", dir, err), "check that "+dir+" exists and is readable")
	}
	cks, err := findCheckpoints(f.env.path(dir))
	if err != nil {
		return failR(fmt.Sprintf("read %s: %v", dir, err), "check that "+dir+" exists and is readable")
	}
	free := units.FormatBytes(st.FreeBytes)
	if len(cks) == 0 {
		return okR(fmt.Sprintf("%s free in %s; no checkpoints there yet to size against", free, dir)).with("free_bytes", st.FreeBytes)
	}
	newest := cks[0]
	need := newest.Bytes * uint64(f.opts.Keep)
	ev := fmt.Sprintf("%s free in %s; the newest checkpoint %s is %s, keeping %d needs %s", free, dir, newest.Name, units.FormatBytes(newest.Bytes), f.opts.Keep, units.FormatBytes(need))
	r := okR(ev)
	fix := "free space or move the directory to a larger volume; keep fewer checkpoints (--keep, or your trainer's save_total_limit)"
	switch {
	case st.FreeBytes < newest.Bytes:
		r = failR(ev+": the next checkpoint does not fit; torch.save dies half-written with \"No space left on device\"", fix)
	case st.FreeBytes < need:
		r = warnR(ev+": the disk fills before the oldest is rotated out", fix)
	}
	return r.with("free_bytes", st.FreeBytes).with("newest_bytes", newest.Bytes).with("need_bytes", need)
}

func checkWritable(f *facts) Result {
	if f.opts.Dir == "" {
		return noDirR()
	}
	dir := f.opts.Dir
	try := f.env.TryWrite
	if try == nil {
		try = TryWriteDir
	}
	res, err := try(f.env.path(dir))
	if err != nil {
		return failR(fmt.Sprintf("cannot write a checkpoint in %s: %v", dir, err),
			"fix its permissions or mount it read-write (docker -v ...:rw), or choose another --dir")
	}
	if !res.RenameKept {
		fstype := ""
		if m, _, ok := dirMount(f); ok {
			fstype = " (" + m.FSType + ")"
		}
		return warnR(fmt.Sprintf("%s%s is writable but rename is not atomic there (the file was copied, not renamed): a crash mid-save leaves a partial checkpoint", dir, fstype),
			"save to a local disk and upload finished checkpoints, or write under a final name your loader skips until complete")
	}
	return okR(fmt.Sprintf("%s is writable and a temporary file renames atomically within it", dir))
}
