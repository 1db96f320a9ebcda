// Package groups keeps the records that make a distributed job one story
// across its nodes: each supervised rank's account (ranks.Member), one
// file per rank in a directory every node of the job can read, so that
// `vramguard explain --group GROUP` on any node judges the whole job, and
// a rank that ended because another failed names that rank and node.
//
// The directory is plain files, never a database: DIR/GROUP/rank-R.json,
// each written whole to a temporary file beside it and renamed over the
// old one, so a reader on any node sees an old record or the new one,
// never half of one. That is safe on NFS, where SQLite is not (its locks
// and its WAL's shared memory do not work across machines): each node's
// runs stay in that node's database, and only these records are shared.
package groups

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/vramguard/vramguard/internal/ranks"
)

// Dir is a directory of group records.
type Dir string

// ErrNoGroup is returned by Read for a group with no record in the
// directory.
var ErrNoGroup = errors.New("no record of the group")

// Bounds on what Read takes: a record larger than maxRecord, or files
// past maxRanks in one group, are not read.
const (
	maxRecord = 1 << 20
	maxRanks  = 1 << 16
)

// escape makes a group name one safe path element: letters, digits, '.',
// '_' and '-' stay, anything else is %XX; "." and ".." are escaped whole.
func escape(group string) string {
	var b strings.Builder
	for i := 0; i < len(group); i++ {
		c := group[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || (c == '.' && i > 0) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// Path is the directory of group's records.
func (d Dir) Path(group string) string { return filepath.Join(string(d), escape(group)) }

// Write records m, replacing the rank's earlier record: a temporary file
// in the group's directory, synced, then renamed over rank-R.json.
func (d Dir) Write(m ranks.Member) error {
	if m.Group == "" {
		return errors.New("record a rank: no group")
	}
	dir := d.Path(m.Group)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("group records: %w", err)
	}
	if err := ownDir(dir); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".rank-"+strconv.Itoa(m.Rank.Rank)+"-*.tmp")
	if err != nil {
		return fmt.Errorf("group records: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, "rank-"+strconv.Itoa(m.Rank.Rank)+".json"))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("group records: write rank %d of %s: %w", m.Rank.Rank, m.Group, err)
	}
	return nil
}

// Read returns the records of group, in no order. A file that is not a
// whole record (another program's, or damaged) is skipped; ErrNoGroup
// when none is there.
func (d Dir) Read(group string) ([]ranks.Member, error) {
	dir := d.Path(group)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w %s in %s", ErrNoGroup, group, string(d))
	}
	if err != nil {
		return nil, fmt.Errorf("group records: %w", err)
	}
	var out []ranks.Member
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "rank-") || !strings.HasSuffix(name, ".json") || !e.Type().IsRegular() {
			continue
		}
		if len(out) >= maxRanks {
			break
		}
		m, err := readRecord(filepath.Join(dir, name))
		if err != nil || m.Group != group {
			continue
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w %s in %s", ErrNoGroup, group, string(d))
	}
	return out, nil
}

func readRecord(path string) (ranks.Member, error) {
	var m ranks.Member
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return m, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !mine(st) {
		return m, errors.New("not a record of this user's")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
	if err != nil {
		return m, err
	}
	if len(b) > maxRecord {
		return m, errors.New("record too large")
	}
	err = json.Unmarshal(b, &m)
	return m, err
}

// Story reads group's records and judges them (ranks.JudgeGroup).
func (d Dir) Story(group string) (*ranks.Group, error) {
	ms, err := d.Read(group)
	if err != nil {
		return nil, err
	}
	return ranks.JudgeGroup(group, ms), nil
}

// mine reports whether st is owned by this process's user: a job's tasks
// all run as its user, so a record another user wrote (in a directory
// others may write) is none of the job's.
func mine(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Geteuid()
}

// ownDir refuses a group's directory that is not a directory of this
// user's (a link, or one another user made first in a shared directory).
func ownDir(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("group records: %w", err)
	}
	if !st.IsDir() || !mine(st) {
		return fmt.Errorf("group records: %s is not a directory of this user's", dir)
	}
	return nil
}
