package store

import (
	"context"
	"fmt"
	"time"
)

// kernelsSchema maps Jupyter kernels to the runs that supervise them
// (`vramguard run --kernel`), so that a kernel Jupyter restarts continues
// its run, and a notebook's next kernel can say how the last one died.
const kernelsSchema = `CREATE TABLE kernels (
	kernel_id TEXT PRIMARY KEY,
	run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	notebook TEXT NOT NULL DEFAULT '',
	updated_at INTEGER NOT NULL,
	noticed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX kernels_notebook ON kernels(notebook, updated_at);`

// Kernel ties a Jupyter kernel id to its run.
type Kernel struct {
	KernelID string    `json:"kernel_id"`
	RunID    string    `json:"run_id"`
	Notebook string    `json:"notebook"`
	Updated  time.Time `json:"updated_at"`
	// Noticed is the last attempt whose death a later kernel announced.
	Noticed int `json:"noticed"`
}

// SetKernel records that kernelID runs as runID. An empty notebook keeps
// the one already known.
func (s *Store) SetKernel(ctx context.Context, kernelID, runID, notebook string, t time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO kernels(kernel_id,run_id,notebook,updated_at) VALUES(?,?,?,?)
		ON CONFLICT(kernel_id) DO UPDATE SET run_id=excluded.run_id, updated_at=excluded.updated_at,
		notebook=CASE WHEN excluded.notebook='' THEN kernels.notebook ELSE excluded.notebook END`,
		kernelID, runID, notebook, ms(t))
	if err != nil {
		return fmt.Errorf("record kernel %s: %w", kernelID, err)
	}
	return nil
}

// SetKernelNoticed records that attempt's death of kernelID's run has been
// announced.
func (s *Store) SetKernelNoticed(ctx context.Context, kernelID string, attempt int) error {
	_, err := s.db.ExecContext(ctx, `UPDATE kernels SET noticed=max(noticed,?) WHERE kernel_id=?`, attempt, kernelID)
	return err
}

const kernelCols = `kernel_id,run_id,notebook,updated_at,noticed`

func scanKernel(sc scanner) (*Kernel, error) {
	var k Kernel
	var t int64
	if err := sc.Scan(&k.KernelID, &k.RunID, &k.Notebook, &t, &k.Noticed); err != nil {
		return nil, err
	}
	k.Updated = time.UnixMilli(t)
	return &k, nil
}

// KernelByID returns the record of a kernel id, or ErrNotFound.
func (s *Store) KernelByID(ctx context.Context, kernelID string) (*Kernel, error) {
	return queryOne(ctx, s.db, scanKernel, `SELECT `+kernelCols+` FROM kernels WHERE kernel_id=?`, kernelID)
}

// LatestKernelForNotebook returns the most recently started kernel of a
// notebook other than except, or ErrNotFound.
func (s *Store) LatestKernelForNotebook(ctx context.Context, notebook, except string) (*Kernel, error) {
	return queryOne(ctx, s.db, scanKernel, `SELECT `+kernelCols+` FROM kernels WHERE notebook=? AND kernel_id<>?
		ORDER BY updated_at DESC LIMIT 1`, notebook, except)
}

// Kernels lists every recorded kernel, newest first.
func (s *Store) Kernels(ctx context.Context) ([]*Kernel, error) {
	return queryAll(ctx, s.db, "list kernels", scanKernel, `SELECT `+kernelCols+` FROM kernels ORDER BY updated_at DESC`)
}
