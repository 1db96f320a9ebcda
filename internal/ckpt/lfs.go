package ckpt

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
)

// FormatLFSPointer is a Git LFS pointer file: what a clone without git-lfs
// leaves in place of a file kept in LFS, under the file's own name.
const FormatLFSPointer = "git-lfs-pointer"

// lfsPointer is what a pointer file says of the file it stands for.
type lfsPointer struct {
	OID  string // "sha256:<64 hex>"
	Size int64
}

// maxLFSPointer is the spec's bound: pointer files are under 1024 bytes.
const maxLFSPointer = 1024

// readLFSPointer parses r as a Git LFS pointer (spec v1: "version
// https://git-lfs.github.com/spec/v1", then sorted key-value lines, with
// oid and size), ok false when it is none.
func readLFSPointer(r io.ReaderAt, size int64) (lfsPointer, bool) {
	var p lfsPointer
	if size < 20 || size >= maxLFSPointer {
		return p, false
	}
	b := make([]byte, size)
	if n, _ := r.ReadAt(b, 0); int64(n) != size {
		return p, false
	}
	if !bytes.HasPrefix(b, []byte("version https://git-lfs.github.com/spec/")) &&
		!bytes.HasPrefix(b, []byte("version https://hawser.github.com/spec/")) {
		return p, false
	}
	hasSize := false
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			return p, false
		}
		switch k {
		case "oid":
			p.OID = v
		case "size":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return p, false
			}
			p.Size, hasSize = n, true
		}
	}
	return p, p.OID != "" && hasSize
}

// describe is the one-line account of a pointer: what it is, where the
// file is, and how to fetch it.
func (p lfsPointer) describe() string {
	oid := p.OID
	if len(oid) > 7+16 {
		oid = oid[:7+16] + "…"
	}
	return fmt.Sprintf("a Git LFS pointer, not the file: its %s are in Git LFS (oid %s) and were not fetched; run `git lfs pull` in the repository", humanBytes(p.Size), oid)
}

// lfsCheckpointName: a pointer is a checkpoint candidate only under a
// checkpoint's name, as its bytes say nothing of what it stands for (a
// pointer to a dataset is no checkpoint).
func lfsCheckpointName(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".pkl", ".pickle", ".tar", ".distcp", ".h5", ".npz", ".npy", ".joblib", ".model":
		return true
	}
	return false
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
