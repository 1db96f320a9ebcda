package procfs

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// Rollup is the subset of /proc/<pid>/smaps_rollup vramguard uses, in bytes.
// The kernel walks the process's page tables to produce it, so its figures
// are exact at the moment of the read (stat's rss counters may lag), and it
// costs more than stat: read it for a job's processes, not for a whole
// machine every second.
type Rollup struct {
	// RSS counts every resident page mapped by the process, shared or not.
	RSS uint64
	// PSS divides each shared page among the processes that map it, so PSS
	// summed over processes counts every page once: the right sum for a
	// tree of forked processes (DataLoader workers) that share pages.
	PSS                         uint64
	PSSAnon, PSSFile, PSSShmem  uint64
	SharedClean, SharedDirty    uint64
	PrivateClean, PrivateDirty  uint64
	Swap, SwapPSS, AnonHugePage uint64
}

// SmapsRollup reads /proc/<pid>/smaps_rollup (Linux 4.14 and later). A
// kernel thread or a zombie has no memory map: its file is empty and the
// result is all zero.
func (fs FS) SmapsRollup(pid int) (Rollup, error) {
	root := fs.Root
	if root == "" {
		root = "/"
	}
	b, err := os.ReadFile(filepath.Join(root, "proc", strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return Rollup{}, err
	}
	return ParseSmapsRollup(b), nil
}

// Exists reports whether /proc/<pid> is there (a zombie's is).
func (fs FS) Exists(pid int) bool {
	root := fs.Root
	if root == "" {
		root = "/"
	}
	_, err := os.Stat(filepath.Join(root, "proc", strconv.Itoa(pid)))
	return err == nil
}

// ParseSmapsRollup parses smaps_rollup ("Key:   N kB" lines after a header
// line); unknown or malformed lines are ignored.
func ParseSmapsRollup(b []byte) Rollup {
	var r Rollup
	for len(b) > 0 {
		var line []byte
		line, b = cutLine(b)
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *uint64
		switch string(k) {
		case "Rss":
			dst = &r.RSS
		case "Pss":
			dst = &r.PSS
		case "Pss_Anon":
			dst = &r.PSSAnon
		case "Pss_File":
			dst = &r.PSSFile
		case "Pss_Shmem":
			dst = &r.PSSShmem
		case "Shared_Clean":
			dst = &r.SharedClean
		case "Shared_Dirty":
			dst = &r.SharedDirty
		case "Private_Clean":
			dst = &r.PrivateClean
		case "Private_Dirty":
			dst = &r.PrivateDirty
		case "Swap":
			dst = &r.Swap
		case "SwapPss":
			dst = &r.SwapPSS
		case "AnonHugePages":
			dst = &r.AnonHugePage
		default:
			continue
		}
		f := bytes.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			continue
		}
		*dst = n * 1024
	}
	return r
}
