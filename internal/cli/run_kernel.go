package cli

import (
	"context"

	"github.com/vramguard/vramguard/internal/store"
)

// runKernel supervises a Jupyter kernel (run --kernel). Placeholder until the
// Jupyter integration lands.
func runKernel(ctx context.Context, f *Factory, o *RunOptions, st *store.Store, limit uint64, id string) error {
	return Envf("--kernel is not built yet")
}
