package snapshot

import (
	"fmt"
	"os"
)

// ReadFile decodes the snapshot at path (see Decode).
func ReadFile(path string, lim Limits, progress func(int64)) (*Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	defer f.Close()
	s, err := Decode(f, lim, progress)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	return s, nil
}
