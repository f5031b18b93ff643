package nodeexec

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"orkpipe/artifacts"
	"orkpipe/stages"
)

// Adopter stores a finished file without copying it; *artifacts.Store implements it (the file
// must lie in one of the store's TempDirs).
type Adopter interface {
	AdoptFile(ctx context.Context, path string) (artifacts.Object, error)
	AdoptHashed(ctx context.Context, path string, h artifacts.HashedFile) (artifacts.Object, error)
}

// IngestOptions tune Ingest.
type IngestOptions struct {
	// Precheck re-hashes every output before it is adopted, so that a file that disagrees with
	// the record never enters the store; the adoption takes that hash's stamp (AdoptHashed), so an
	// output unchanged since is read once. Executors that export outputs across a boundary (Dagger)
	// set it; the local executor, whose files never left the store's scratch directory, does not.
	Precheck bool
	// Hashed are the stamps of Run's hashes of the outputs (Result.Hashed), from a run in this
	// process: an output whose stamp names the recorded digest and size is adopted with
	// AdoptHashed, which reads it again only if it changed since (see artifacts.HashedFile).
	Hashed map[string]artifacts.HashedFile
}

// Ingest checks the output directory outDir of node key (key material m) against its result
// record and stores every output through store, in the stage's output order. It fails, wrapping
// ErrBadResult or ErrExportMismatch, when the record is missing or describes another node, when
// the outputs directory holds other files than the stage declares, or when a file's type, size
// or digest differs from the record.
func Ingest(ctx context.Context, store Adopter, outDir string, key artifacts.Digest, m stages.KeyMaterial, opts IngestOptions) ([]artifacts.NamedObject, Result, error) {
	res, err := ReadResult(filepath.Join(outDir, ResultFile))
	if err != nil {
		return nil, Result{}, err
	}
	b, err := stages.Bind(m)
	if err != nil {
		return nil, Result{}, err
	}
	switch {
	case res.Key != key:
		return nil, Result{}, fmt.Errorf("%w: %s: key %s, want %s", ErrBadResult, outDir, res.Key, key)
	case res.Stage != m.Stage || res.Version != m.Version:
		return nil, Result{}, fmt.Errorf("%w: %s: stage %q version %d, want %q version %d", ErrBadResult, outDir, res.Stage, res.Version, m.Stage, m.Version)
	}
	want := b.Spec().Outputs
	var got []string
	for _, o := range res.Outputs {
		got = append(got, o.Name)
	}
	if !slices.Equal(got, want) {
		return nil, Result{}, fmt.Errorf("%w: %s: outputs %v, stage %q declares %v", ErrBadResult, outDir, got, m.Stage, want)
	}
	dir := filepath.Join(outDir, OutputsDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, Result{}, fmt.Errorf("%w: %v", ErrExportMismatch, err)
	}
	if len(ents) != len(want) {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return nil, Result{}, fmt.Errorf("%w: %s holds %v, the record names %v", ErrExportMismatch, dir, names, want)
	}
	stamps := make(map[string]artifacts.HashedFile, len(res.Outputs))
	for name, h := range opts.Hashed {
		stamps[name] = h
	}
	for _, o := range res.Outputs {
		h, err := checkOutput(ctx, filepath.Join(dir, o.Name), o, opts.Precheck)
		if err != nil {
			return nil, Result{}, err
		}
		if opts.Precheck {
			stamps[o.Name] = h // the precheck's hash is the one adoption needs
		}
	}
	outs := make([]artifacts.NamedObject, 0, len(res.Outputs))
	for _, o := range res.Outputs {
		if err := ctx.Err(); err != nil {
			return nil, Result{}, err
		}
		p := filepath.Join(dir, o.Name)
		var obj artifacts.Object
		if h, ok := stamps[o.Name]; ok && h.Digest == o.Digest && h.Size == o.Size {
			obj, err = store.AdoptHashed(ctx, p, h)
		} else {
			obj, err = store.AdoptFile(ctx, p)
		}
		if err != nil {
			return nil, Result{}, fmt.Errorf("storing output %q (%s): %w", o.Name, p, err)
		}
		if obj.Digest != o.Digest || obj.Size != o.Size {
			return nil, Result{}, fmt.Errorf("%w: output %q (%s): stored as %s (%d bytes), the record says %s (%d bytes)", ErrExportMismatch, o.Name, p, obj.Digest, obj.Size, o.Digest, o.Size)
		}
		outs = append(outs, o)
	}
	return outs, res, nil
}

// checkOutput checks that path is a regular file of the recorded size and, with hash, digest; it
// returns the stamp of that hash (artifacts.HashStamped), for the adoption (the zero stamp without).
func checkOutput(ctx context.Context, path string, o artifacts.NamedObject, hash bool) (artifacts.HashedFile, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return artifacts.HashedFile{}, fmt.Errorf("%w: output %q: %v", ErrExportMismatch, o.Name, err)
	}
	if !st.Mode().IsRegular() {
		return artifacts.HashedFile{}, fmt.Errorf("%w: output %q: %s is not a regular file (%s)", ErrExportMismatch, o.Name, path, st.Mode().Type())
	}
	if st.Size() != o.Size {
		return artifacts.HashedFile{}, fmt.Errorf("%w: output %q: %s is %d bytes, the record says %d", ErrExportMismatch, o.Name, path, st.Size(), o.Size)
	}
	if !hash {
		return artifacts.HashedFile{}, nil
	}
	h, err := artifacts.HashStamped(ctx, path)
	if err != nil {
		return artifacts.HashedFile{}, fmt.Errorf("hashing output %q (%s): %w", o.Name, path, err)
	}
	if h.Digest != o.Digest {
		return artifacts.HashedFile{}, fmt.Errorf("%w: output %q: %s hashes to %s, the record says %s", ErrExportMismatch, o.Name, path, h.Digest, o.Digest)
	}
	return h, nil
}
