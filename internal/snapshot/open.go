package snapshot

import (
	"bufio"
	"fmt"
	"os"
)

// ReadFile decodes the snapshot at path (see Decode), or the one a
// memory_viz HTML page embeds.
func ReadFile(path string, lim Limits, progress func(int64)) (*Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, htmlScan)
	head, _ := r.Peek(512)
	var s *Snapshot
	if isHTML(head) {
		s, err = decodeHTML(r, lim, progress)
	} else {
		s, err = Decode(r, lim, progress)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	return s, nil
}
