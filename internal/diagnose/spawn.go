package diagnose

import (
	"strconv"
	"strings"

	"github.com/vramguard/vramguard/internal/lazyre"
)

// PeerFailed is the reason of a rank of a distributed job that ended
// because another rank failed: a collective that timed out or lost its
// peer, or the launcher stopping the ranks that were left (package ranks
// decides it; docs/FAILURES.md).
const PeerFailed = "peer_failed"

// torch.multiprocessing.spawn's reports of a failed process, printed by the
// parent: ProcessRaisedException's message carries the child's traceback
// after "-- Process N terminated with the following error:", and
// ProcessExitedException says "process N terminated with signal SIGKILL" or
// "… with exit code 1". N is the process index mp.spawn gave the child (the
// rank, as mp.spawn is used).
var (
	reSpawnHeader = lazyre.New(`^-- Process (\d+) terminated with the following error:\s*$`)
	reSpawnExited = lazyre.New(`ProcessExitedException: process (\d+) terminated with (?:signal (SIG[A-Z0-9]+)|exit code (-?\d+))`)
)

// SpawnExit is what ProcessExitedException says of a process: its index
// and how it ended.
type SpawnExit struct {
	Process  int
	Signal   string // "SIGKILL"; "" when it exited with Code
	Code     int
	LineText string
}

// ParseSpawnExit reads mp.spawn's ProcessExitedException line.
func ParseSpawnExit(text string) (SpawnExit, bool) {
	m := reSpawnExited.FindStringSubmatch(text)
	if m == nil {
		return SpawnExit{}, false
	}
	e := SpawnExit{Process: atoi(m[1]), Signal: m[2], LineText: strings.TrimSpace(text)}
	if m[3] != "" {
		e.Code, _ = strconv.Atoi(m[3])
	}
	return e, true
}

// spawnReport follows mp.spawn's report through the lines ReadLines reads:
// the lines of the child's traceback after the header take the process the
// header names, up to two blank lines in a row (the end of the message), a
// new header, or a line another writer's prefix names.
type spawnReport struct {
	in            bool
	index, blanks int
}

const spawnSource = "mp.spawn process "

func (s *spawnReport) read(l *Line) {
	t := strings.TrimSpace(l.Text)
	if m := reSpawnHeader.FindStringSubmatch(t); m != nil && l.Rank < 0 {
		s.in, s.index, s.blanks = true, atoi(m[1]), 0
		return
	}
	if e, ok := ParseSpawnExit(t); ok && l.Rank < 0 {
		s.in = false
		l.Rank, l.Source = e.Process, spawnSource+strconv.Itoa(e.Process)
		return
	}
	if !s.in {
		return
	}
	switch {
	case l.Source != "" || l.Rank >= 0:
		s.in = false
		return
	case t == "":
		s.blanks++
		if s.blanks >= 2 {
			s.in = false
		}
		return
	}
	s.blanks = 0
	l.Rank, l.Source = s.index, spawnSource+strconv.Itoa(s.index)
}
