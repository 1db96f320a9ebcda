package ckpt

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
)

// scanChildEnv, when set, makes the test binary scan that directory and
// print what it found instead of running tests: TestScanDirUnreadable runs
// it as an unprivileged user, whom permissions stop as they stop no root.
const scanChildEnv = "VRAMGUARD_CKPT_TEST_SCAN_AS_CHILD"

// scanChildReport is what the child prints: who it ran as and ScanPath's
// results.
type scanChildReport struct {
	EUID    int           `json:"euid"`
	Results []*ScanResult `json:"results"`
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(scanChildEnv); dir != "" {
		rs, err := ScanPath(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		json.NewEncoder(os.Stdout).Encode(scanChildReport{EUID: os.Geteuid(), Results: rs})
		os.Exit(0)
	}
	os.Exit(m.Run())
}
