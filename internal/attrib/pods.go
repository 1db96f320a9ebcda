package attrib

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// DefaultPodLogDir is where the kubelet keeps pods' logs: a directory per
// pod named <namespace>_<pod-name>_<pod-uid>.
const DefaultPodLogDir = "/var/log/pods"

// PodLogDir is the kubelet's pod log directory below root (the directory
// that holds proc/, "" for "/"), so fixture trees can carry one.
func PodLogDir(root string) string {
	if root == "" {
		return DefaultPodLogDir
	}
	return filepath.Join(root, DefaultPodLogDir)
}

// Pod is a Kubernetes pod as the kubelet's log directory names it.
type Pod struct {
	Namespace string
	Name      string
	UID       string // with dashes, as the API shows it
}

// PodIndex maps a pod's UID (what a process's cgroup path gives) to its
// namespace and name, read from the names of the kubelet's pod log
// directories, so a node agent learns them without the API server. Names
// and UIDs cannot contain '_' (namespaces and pod names are DNS names), so a
// directory name splits unambiguously.
//
// What it read is kept; the directory is read again only when a UID is not
// known and the directory changed (its mtime) or MinRescan has passed since
// the last read, so a sampler may ask every second at the cost of one stat
// per unknown pod. A nil *PodIndex knows no pods. Safe for concurrent use.
type PodIndex struct {
	// Dir is the kubelet's pod log directory (DefaultPodLogDir).
	Dir string
	// MinRescan bounds how often an unchanged directory is read again for
	// an unknown UID (default 10 s).
	MinRescan time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu      sync.Mutex
	pods    map[string]Pod
	scanned time.Time // when Dir was last read (zero: never)
	mtime   time.Time // Dir's mtime then
}

// NewPodIndex returns an index over dir.
func NewPodIndex(dir string) *PodIndex {
	return &PodIndex{Dir: dir, MinRescan: 10 * time.Second, Now: time.Now}
}

// Lookup returns the pod whose UID is uid; '_' for '-' (as the systemd
// cgroup driver writes a UID) and case do not matter.
func (x *PodIndex) Lookup(uid string) (Pod, bool) {
	if x == nil || uid == "" {
		return Pod{}, false
	}
	uid = normUID(uid)
	x.mu.Lock()
	defer x.mu.Unlock()
	if p, ok := x.pods[uid]; ok {
		return p, true
	}
	if x.stale() {
		x.scan()
	}
	p, ok := x.pods[uid]
	return p, ok
}

// stale reports whether the directory may hold pods not read yet. x.mu is
// held.
func (x *PodIndex) stale() bool {
	if x.scanned.IsZero() {
		return true
	}
	min := x.MinRescan
	if min <= 0 {
		min = 10 * time.Second
	}
	if x.now().Sub(x.scanned) >= min {
		return true
	}
	st, err := os.Stat(x.Dir)
	return err == nil && !st.ModTime().Equal(x.mtime)
}

// scan reads the directory's entries anew; pods whose directory is gone are
// forgotten, so the index never outgrows the directory. x.mu is held.
func (x *PodIndex) scan() {
	x.scanned = x.now()
	st, err := os.Stat(x.Dir)
	if err != nil {
		x.pods = nil // not a Kubernetes node, or not mounted
		return
	}
	x.mtime = st.ModTime()
	ents, err := os.ReadDir(x.Dir)
	if err != nil {
		return // keep what was known
	}
	pods := make(map[string]Pod, len(ents))
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if p, ok := ParsePodLogDir(e.Name()); ok {
			pods[p.UID] = p
		}
	}
	x.pods = pods
}

func (x *PodIndex) now() time.Time {
	if x.Now != nil {
		return x.Now()
	}
	return time.Now()
}

// ParsePodLogDir splits a kubelet pod log directory's name,
// <namespace>_<pod-name>_<pod-uid>. Older kubelets named it by the UID
// alone; that says nothing of the pod and is refused.
func ParsePodLogDir(name string) (Pod, bool) {
	parts := strings.Split(name, "_")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || !isPodUID(parts[2]) {
		return Pod{}, false
	}
	return Pod{Namespace: parts[0], Name: parts[1], UID: normUID(parts[2])}, true
}

func normUID(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "-")) }

// isPodUID accepts an API UID (8-4-4-4-12 hex digits) or a static pod's
// (32 hex digits, the hash of its manifest).
func isPodUID(s string) bool {
	switch len(s) {
	case 36:
		for i, c := range s {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if c != '-' {
					return false
				}
			} else if !isHex(c) {
				return false
			}
		}
		return true
	case 32:
		for _, c := range s {
			if !isHex(c) {
				return false
			}
		}
		return true
	}
	return false
}

func isHex(c rune) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
