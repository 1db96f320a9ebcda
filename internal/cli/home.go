package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/vramguard/vramguard/internal/groups"
)

// Home is the directory of this node's database and run files: the state
// directory (StateDir), unless a network file system holds it (a cluster's
// home over NFS), where SQLite's locks are unsafe and every node's
// supervisors would write one file: then this node's own directory
// (NodeHome). The state directory keeps the job groups' records
// (GroupDir), which are plain files safe to share.
func (f *Factory) Home() string {
	home, _, _ := f.homes()
	return home
}

// homes is Home, the network file system that holds the state directory
// ("" when a local one does), and why Home is the state directory after
// all when it is on one ("" when it is not).
func (f *Factory) homes() (home, netfs, why string) {
	dir := f.StateDir()
	netfs = f.netFS(dir)
	if netfs == "" {
		return dir, "", ""
	}
	node, err := f.NodeHome()
	if err != nil {
		return dir, netfs, err.Error()
	}
	return node, netfs, ""
}

func (f *Factory) netFS(path string) string {
	if f.NetFS != nil {
		return f.NetFS(path)
	}
	return groups.NetworkFS(path)
}

// NodeHome is where this node keeps its database when the state directory
// is on a network file system: $VRAMGUARD_NODE_HOME, else
// /var/tmp/vramguard-UID (local to the node, kept across reboots), which
// must be a directory of this user's that no one else may write.
func (f *Factory) NodeHome() (string, error) {
	if d := f.Getenv("VRAMGUARD_NODE_HOME"); d != "" {
		return d, nil
	}
	dir := filepath.Join(nodeHomeBase, "vramguard-"+strconv.Itoa(os.Getuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("cannot make %s: %v", dir, err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.IsDir():
		return "", fmt.Errorf("%s is not a directory (set VRAMGUARD_NODE_HOME to a directory on this node)", dir)
	case !ok || int(sys.Uid) != os.Getuid():
		return "", fmt.Errorf("%s belongs to another user (set VRAMGUARD_NODE_HOME to a directory on this node)", dir)
	case st.Mode().Perm()&0o022 != 0:
		return "", fmt.Errorf("%s may be written by others (set VRAMGUARD_NODE_HOME to a directory on this node)", dir)
	}
	return dir, nil
}

// nodeHomeBase holds the default node directories (tests move it).
var nodeHomeBase = "/var/tmp"

// GroupDir is where the records of distributed jobs' ranks are shared
// between nodes (package groups): $VRAMGUARD_GROUP_DIR, else the state
// directory's groups/ (shared by the nodes when the home is).
func (f *Factory) GroupDir() string {
	if d := f.Getenv("VRAMGUARD_GROUP_DIR"); d != "" {
		return d
	}
	return filepath.Join(f.StateDir(), "groups")
}
