package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"orkpipe/artifacts"
	"orkpipe/stages"
)

// ExecRequest is everything needed to run one node: its key material (which alone determines the
// outputs) and the files its inputs and tools resolve to. Inputs and tools carry the digests the
// key material names; a remote executor ships the files by digest.
type ExecRequest struct {
	Key      artifacts.Digest
	Material stages.KeyMaterial
	Inputs   map[string]stages.File
	Tools    map[string]stages.File
}

// Executor runs a node and returns its outputs, already stored in the CAS. It must not write an
// action record; the engine does that once every output is stored.
type Executor interface {
	Execute(ctx context.Context, req ExecRequest) ([]artifacts.NamedObject, error)
}

// Local runs nodes in this process through stages.Execute, in a TempDir of the store, and adopts
// each output file into the CAS without copying.
type Local struct {
	Store  Store
	Logger *slog.Logger
}

// Execute implements Executor.
func (l Local) Execute(ctx context.Context, req ExecRequest) (outs []artifacts.NamedObject, err error) {
	tmp, err := l.Store.TempDir(ctx)
	if err != nil {
		return nil, fmt.Errorf("scratch directory for key %s: %w", req.Key, err)
	}
	defer func() {
		if rerr := os.RemoveAll(tmp); rerr != nil && err == nil {
			err = fmt.Errorf("removing scratch directory %s: %w", tmp, rerr)
		}
	}()
	outDir := filepath.Join(tmp, "out")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		return nil, err
	}
	logger := l.Logger
	if logger == nil {
		logger = slog.Default()
	}
	names, err := stages.Execute(ctx, req.Material, req.Inputs, req.Tools, outDir, logger)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p := filepath.Join(outDir, name)
		obj, err := l.Store.AdoptFile(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("storing output %q (%s): %w", name, p, err)
		}
		outs = append(outs, artifacts.NamedObject{Name: name, Digest: obj.Digest, Size: obj.Size})
	}
	return outs, nil
}

// isCorrupt reports whether err says a stored object failed verification.
func isCorrupt(err error) bool { return errors.Is(err, artifacts.ErrCorrupt) }
