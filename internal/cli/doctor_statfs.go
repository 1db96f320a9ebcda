package cli

import (
	"golang.org/x/sys/unix"

	"github.com/vramguard/vramguard/internal/doctor"
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

// statfs reports on the filesystem holding p.
func statfs(p string) (doctor.FSInfo, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return doctor.FSInfo{}, err
	}
	bs := uint64(st.Bsize)
	return doctor.FSInfo{
		Type:       fsMagic[int64(st.Type)],
		TotalBytes: st.Blocks * bs,
		FreeBytes:  st.Bavail * bs,
	}, nil
}
