package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"orkpipe/artifacts"
	"orkpipe/pipelines/nodeexec"
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

// ProvenanceExecutor is implemented by executors that run nodes outside this process (Dagger):
// with the outputs they return the provenance of the run (host, times, the binary that ran it,
// from the node's result record), which the engine records instead of its own host and binary.
// A Provenance without a Host says the node ran in this process after all (a wrapper that serves
// some nodes itself, such as verify.Executor's verify-board nodes): the engine records this
// process, as it does for an Executor's nodes.
type ProvenanceExecutor interface {
	Executor
	ExecuteProvenance(ctx context.Context, req ExecRequest) ([]artifacts.NamedObject, artifacts.Provenance, error)
}

// Local runs nodes in this process through nodeexec.Run — the code path of `orkpipe node exec` —
// in a TempDir of the store: the inputs and tools are symlinked into a directory named by digest,
// the stage writes its outputs and result record, and nodeexec.Ingest adopts each output into the
// CAS without copying once it matches the record.
type Local struct {
	Store  Store
	Logger *slog.Logger
	// BeforeIngest, if set, is called with the node's output directory between the run and the
	// ingest: fault injection for the executor conformance suite (executortest); nil otherwise.
	BeforeIngest func(outDir string) error
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
	inDir, outDir := filepath.Join(tmp, "in"), filepath.Join(tmp, "out")
	if err := LinkInputs(inDir, req); err != nil {
		return nil, err
	}
	material, err := req.Material.Canonical()
	if err != nil {
		return nil, err
	}
	logger := l.Logger
	if logger == nil {
		logger = slog.Default()
	}
	res, err := nodeexec.Run(ctx, material, inDir, outDir, nodeexec.WithKey(req.Key), nodeexec.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	if l.BeforeIngest != nil {
		if err := l.BeforeIngest(outDir); err != nil {
			return nil, err
		}
	}
	outs, _, err = nodeexec.Ingest(ctx, l.Store, outDir, req.Key, req.Material, nodeexec.IngestOptions{Hashed: res.Hashed})
	return outs, err
}

// LinkInputs creates dir holding, for every distinct input and tool digest of req, a symlink
// named by the digest's hex to the file (the input directory of nodeexec.Run).
func LinkInputs(dir string, req ExecRequest) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	for _, set := range []map[string]stages.File{req.Inputs, req.Tools} {
		for name, f := range set {
			abs, err := filepath.Abs(f.Path)
			if err != nil {
				return fmt.Errorf("input %q: %w", name, err)
			}
			link := filepath.Join(dir, f.Digest.Hex())
			if err := os.Symlink(abs, link); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("input %q: %w", name, err)
			}
		}
	}
	return nil
}

// isCorrupt reports whether err says a stored object failed verification.
func isCorrupt(err error) bool { return errors.Is(err, artifacts.ErrCorrupt) }
