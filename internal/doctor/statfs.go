package doctor

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// fsMagic names the filesystems doctor reasons about, by statfs f_type.
var fsMagic = map[int64]string{
	unix.EXT4_SUPER_MAGIC:      "ext4",
	unix.XFS_SUPER_MAGIC:       "xfs",
	unix.BTRFS_SUPER_MAGIC:     "btrfs",
	unix.TMPFS_MAGIC:           "tmpfs",
	unix.RAMFS_MAGIC:           "ramfs",
	unix.OVERLAYFS_SUPER_MAGIC: "overlay",
	unix.NFS_SUPER_MAGIC:       "nfs",
	unix.FUSE_SUPER_MAGIC:      "fuse",
}

// LiveStatfs returns an Env.Statfs that asks the kernel about paths under
// root ("" for "/").
func LiveStatfs(root string) func(string) (FSInfo, error) {
	return func(p string) (FSInfo, error) {
		var st unix.Statfs_t
		if err := unix.Statfs(filepath.Join("/", root, p), &st); err != nil {
			return FSInfo{}, fmt.Errorf("statfs %s: %w", p, err)
		}
		bs := uint64(st.Bsize)
		return FSInfo{Type: fsMagic[int64(st.Type)], TotalBytes: st.Blocks * bs, FreeBytes: st.Bavail * bs}, nil
	}
}
