package ziparc

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Archives written by torch.save (and the hf and malicious fixtures, which
// are real torch zips too) have no anomaly: torch's view and a strict view
// agree.
func TestTorchFixturesHaveNoAnomalies(t *testing.T) {
	var files []string
	for _, pat := range []string{"../testdata/torch/*", "../testdata/torch/*/*", "../testdata/torch/*/*/*", "../testdata/malicious/*"} {
		m, _ := filepath.Glob(pat)
		files = append(files, m...)
	}
	zips := 0
	for _, p := range files {
		b, err := os.ReadFile(p)
		// a .distcp file is torch.save blobs end to end, not one zip
		if err != nil || !bytes.HasPrefix(b, []byte("PK\x03\x04")) || filepath.Ext(p) == ".distcp" {
			continue
		}
		a, err := Open(bytes.NewReader(b), int64(len(b)), DefaultLimits)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		zips++
		if an := a.Anomalies(); len(an) > 0 {
			t.Errorf("%s: anomalies %q", p, an)
		}
		for i := range a.Entries {
			if err := a.CheckCRC(&a.Entries[i], nil, nil); err != nil && filepath.Base(p) != "torch_payload_badcrc.pt" {
				t.Errorf("%s: %v", p, err)
			}
		}
	}
	if zips < 10 {
		t.Fatalf("only %d torch zips found", zips)
	}
}
