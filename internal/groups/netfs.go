package groups

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// networkFS names the file systems, by statfs's f_type, whose files other
// machines share: SQLite's locking is unsafe on them.
var networkFS = map[int64]string{
	0x6969:     "nfs",
	0x517b:     "smb",
	0xff534d42: "cifs",
	0xfe534d42: "smb2",
	0x0bd00bd0: "lustre",
	0x47504653: "gpfs",
	0x19830326: "beegfs",
	0x00c36400: "ceph",
	0x5346414f: "afs",
	0x01021997: "9p",
	0x013111a8: "ibrix",
	0xaad7aaea: "panfs",
}

// NetworkKind names the network file system f_type is ("" for a local
// one).
func NetworkKind(fType int64) string { return networkFS[fType] }

// NetworkFS says which network file system holds path ("" for a local
// one, or when it cannot be told): path itself or, when it does not exist
// yet, its nearest existing parent.
func NetworkFS(path string) string {
	p := filepath.Clean(path)
	for {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err == nil {
			return NetworkKind(int64(st.Type))
		} else if !os.IsNotExist(err) {
			return ""
		}
		parent := filepath.Dir(p)
		if parent == p {
			return ""
		}
		p = parent
	}
}
