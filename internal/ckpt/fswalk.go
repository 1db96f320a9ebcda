package ckpt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// MaxFollowDepth bounds how many directory levels walkFollow descends below
// its root, whatever the links: a safety net on top of loop detection.
const MaxFollowDepth = 64

// ErrDepthLimit is what the walk hands its function for a directory at
// MaxFollowDepth, which it does not descend into.
var ErrDepthLimit = fmt.Errorf("directory nesting deeper than %d levels: not descended into", MaxFollowDepth)

// walkFollow is filepath.WalkDir that follows symbolic links to files and
// to directories, so that a Hugging Face cache snapshot (snapshots/<rev>/
// whose files link to ../../blobs/<sha>) or a run directory whose
// checkpoints are links is seen as the files it points to. fn gets the path
// as reached through the links (always under root) and a DirEntry whose
// Type and Info are the target's; a dangling link is passed as the link
// itself. Each directory, identified by device and inode, is walked once:
// a link back to an ancestor or a second link to the same directory is
// passed to fn and not descended. Paths below MaxFollowDepth levels are not
// visited. SkipDir and SkipAll work as in filepath.WalkDir.
func walkFollow(root string, fn fs.WalkDirFunc) error {
	info, err := os.Stat(root)
	if err != nil {
		err = fn(root, nil, err)
	} else {
		w := &follower{fn: fn, seen: map[fileID]bool{}}
		err = w.walk(root, fs.FileInfoToDirEntry(info), 0)
	}
	if err == filepath.SkipDir || err == filepath.SkipAll {
		return nil
	}
	return err
}

type fileID struct{ dev, ino uint64 }

type follower struct {
	fn   fs.WalkDirFunc
	seen map[fileID]bool
}

func idOf(info fs.FileInfo) (fileID, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), uint64(st.Ino)}, true
}

func (w *follower) walk(path string, d fs.DirEntry, depth int) error {
	if err := w.fn(path, d, nil); err != nil || !d.IsDir() {
		if err == filepath.SkipDir && d.IsDir() {
			err = nil
		}
		return err
	}
	info, err := d.Info()
	if err != nil {
		return w.fn(path, d, err)
	}
	if id, ok := idOf(info); ok {
		if w.seen[id] {
			return nil // a loop, or a directory already walked through another link
		}
		w.seen[id] = true
	}
	if depth >= MaxFollowDepth {
		// Reported, so that a scan names what it did not descend into.
		if err := w.fn(path, d, ErrDepthLimit); err != nil && err != filepath.SkipDir {
			return err
		}
		return nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		if err = w.fn(path, d, err); err != nil {
			if err == filepath.SkipDir {
				err = nil
			}
			return err
		}
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		p := filepath.Join(path, e.Name())
		if e.Type()&fs.ModeSymlink != 0 {
			if ti, err := os.Stat(p); err == nil {
				e = fs.FileInfoToDirEntry(ti)
			}
		}
		if err := w.walk(p, e, depth+1); err != nil {
			if err == filepath.SkipDir {
				break // from a file: skip the rest of this directory
			}
			return err
		}
	}
	return nil
}

// entryIsRegular reports whether a directory entry is a regular file or a
// symbolic link to one.
func entryIsRegular(dir string, e fs.DirEntry) bool {
	if e.Type().IsRegular() {
		return true
	}
	if e.Type()&fs.ModeSymlink == 0 {
		return false
	}
	st, err := os.Stat(filepath.Join(dir, e.Name()))
	return err == nil && st.Mode().IsRegular()
}

// entryIsDir reports whether a directory entry is a directory or a
// symbolic link to one.
func entryIsDir(dir string, e fs.DirEntry) bool {
	if e.IsDir() {
		return true
	}
	if e.Type()&fs.ModeSymlink == 0 {
		return false
	}
	st, err := os.Stat(filepath.Join(dir, e.Name()))
	return err == nil && st.IsDir()
}

// errNotUnderRoot is returned by underRoot.
var errNotUnderRoot = errors.New("resolves outside the directory")

// underRoot checks that path, with every symbolic link in its directory
// part resolved, still lies inside root (also resolved): prune must not
// delete a file that a symlinked directory puts under root but that lives
// elsewhere. The last element itself may be a link (deleting removes the
// link only).
func underRoot(root, path string) error {
	r, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	r, err = filepath.Abs(r)
	if err != nil {
		return err
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return err
	}
	parent, err = filepath.Abs(parent)
	if err != nil {
		return err
	}
	if parent != r && !hasPathPrefix(parent, r) {
		return errNotUnderRoot
	}
	return nil
}

func hasPathPrefix(p, dir string) bool {
	return len(p) > len(dir) && p[:len(dir)] == dir && (p[len(dir)] == filepath.Separator || dir == string(filepath.Separator))
}
