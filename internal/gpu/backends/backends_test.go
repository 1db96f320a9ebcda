package backends

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vramguard/vramguard/internal/gpu"
)

func TestOpen(t *testing.T) {
	ctx := context.Background()
	_, driverErr := Open(ctx, "nvml")
	haveDriver := driverErr == nil
	tests := []struct {
		spec    string
		name    string // backend name wanted ("" when an error is wanted)
		specErr bool
	}{
		{"none", "none", false},
		{"sim:../sim/testdata/reference.json", "sim", false},
		{"sim:", "", true},
		{"sim:/nonexistent.json", "", true},
		{"cuda", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			b, err := Open(ctx, tt.spec)
			if tt.name == "" {
				if err == nil || errors.Is(err, ErrSpec) != tt.specErr {
					t.Fatalf("Open(%q) err = %v, want a spec error", tt.spec, err)
				}
				return
			}
			if err != nil || b.Name() != tt.name {
				t.Fatalf("Open(%q) = %v, %v; want %s", tt.spec, b, err, tt.name)
			}
			b.Close()
		})
	}
	// auto never fails for a missing driver; it says why it shows nothing.
	for _, spec := range []string{"", "auto"} {
		b, err := Open(ctx, spec)
		if err != nil {
			t.Fatalf("Open(%q): %v", spec, err)
		}
		if haveDriver {
			if b.Name() != "nvml" {
				t.Errorf("Open(%q) with a driver = %s, want nvml", spec, b.Name())
			}
		} else if b.Name() != "none" || !strings.Contains(Reason(b), "no NVIDIA driver found") {
			t.Errorf("Open(%q) without a driver = %s (%q), want none saying no driver was found", spec, b.Name(), Reason(b))
		}
		b.Close()
	}
	if !haveDriver && !errors.Is(driverErr, gpu.ErrNoDriver) {
		t.Errorf("Open(nvml) without a driver: %v, want gpu.ErrNoDriver", driverErr)
	}
}
