package gguf

import (
	"context"
	"errors"
	"fmt"
	"os"

	"orkpipe/ork/internal/durable"
)

// StubOption configures EmitStub. Options validate themselves.
type StubOption func(*stubConfig) error

type stubConfig struct {
	replace bool
}

// WithReplace lets EmitStub replace an existing destination file (by atomic rename). Without
// it an existing destination is an error and is left untouched.
func WithReplace() StubOption {
	return func(c *stubConfig) error { c.replace = true; return nil }
}

// StubResult describes an emitted stub.
type StubResult struct {
	Path         string
	Size         int64    // the source's full length
	Owned        []string // owned tensors (left as holes), in file order
	OwnedBytes   int64    // sum of the owned tensors' data sizes
	CopiedBytes  int64    // header plus copied tensor data, padding included
	HeaderDigest [32]byte // BLAKE3 of bytes [0, DataOffset), identical to the source's
	// Unchanged: dst already held exactly these bytes (a stub emitted before from the same source and
	// owned set), so it was left as it was.
	Unchanged bool
}

// EmitStub writes a stub of src at dst: the header region (header, KV, tensor infos, padding)
// byte-identical to src so every tensor keeps its data offset; the data (with its padding) of
// every tensor not in owned copied from src; owned tensors left as file holes; the file
// extended to src's full length (llama.cpp rejects tensor data past the end of the file).
// It streams (kernel copy_file_range where available, bounded buffers otherwise) and writes
// atomically: a temp file in dst's directory, verified (header digest, length, parse),
// fsynced and renamed into place. Every name in owned must be a tensor of src.
//
// An existing dst is replaced only WithReplace; without it, a dst that already holds exactly the stub's
// bytes (compared after the stub is written and verified) is left as it is and the result says
// Unchanged, and any other existing dst is refused with os.ErrExist, untouched.
func EmitStub(ctx context.Context, src *File, owned NameSet, dst string, opts ...StubOption) (StubResult, error) {
	var cfg stubConfig
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return StubResult{}, err
		}
	}
	sf, ok := src.r.(*os.File)
	if !ok {
		return StubResult{}, fmt.Errorf("gguf: EmitStub: source %s must be opened with Open (a file), got %T", src.Path, src.r)
	}
	for name := range owned {
		if src.TensorIndex(name) < 0 {
			return StubResult{}, fmt.Errorf("%w: owned tensor %q is not in the source %s", ErrTensorNotFound, name, src.Path)
		}
	}
	existing := false // dst is a regular file of the stub's length: it may hold this stub already
	if !cfg.replace {
		if st, err := os.Lstat(dst); err == nil {
			if !st.Mode().IsRegular() || st.Size() != src.Size {
				return StubResult{}, fmt.Errorf("gguf: stub %s: %w (%d bytes, not this stub's %d; refusing to overwrite)", dst, os.ErrExist, st.Size(), src.Size)
			}
			existing = true
		}
	}
	srcDigest, err := src.HeaderDigest(ctx)
	if err != nil {
		return StubResult{}, err
	}
	// Locked while written: a stub command killed before the rename leaves gigabytes in dst's
	// directory, which the next one for dst removes (durable.CreateTemp).
	tmp, tmpName, err := durable.CreateTemp(dst)
	if err != nil {
		return StubResult{}, fmt.Errorf("gguf: stub: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			os.Remove(tmpName)
			tmp.Close()
		}
	}()
	res := StubResult{Path: dst, Size: src.Size, HeaderDigest: srcDigest}
	buf := make([]byte, 1<<20)
	copyChunked := func(off, n int64) error {
		const chunk = 64 << 20
		for done := int64(0); done < n; done += chunk {
			if err := ctx.Err(); err != nil {
				return err
			}
			m := min(int64(chunk), n-done)
			if err := copyRange(tmp, sf, off+done, off+done, m, buf); err != nil {
				return fmt.Errorf("gguf: stub %s: copying [%d, %d) from %s: %w", dst, off+done, off+done+m, src.Path, err)
			}
		}
		res.CopiedBytes += n
		return nil
	}
	if err := copyChunked(0, src.DataOffset); err != nil {
		return StubResult{}, err
	}
	for i, t := range src.Tensors {
		if owned.Has(t.Name) {
			res.Owned = append(res.Owned, t.Name)
			res.OwnedBytes += t.Size
			continue
		}
		start, _ := src.DataRange(t)
		end := src.Size // the padded region runs to the next tensor or the end of the file
		if i+1 < len(src.Tensors) {
			end, _ = src.DataRange(src.Tensors[i+1])
		}
		end = min(end, src.Size)
		if err := copyChunked(start, end-start); err != nil {
			return StubResult{}, err
		}
	}
	if err := tmp.Truncate(src.Size); err != nil {
		return StubResult{}, fmt.Errorf("gguf: stub %s: extending to %d bytes: %w", dst, src.Size, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return StubResult{}, err
	}
	// Verify on write: the stub parses, has the source's length and header bytes.
	back, err := Parse(ctx, tmp, src.Size, tmpName)
	if err != nil {
		return StubResult{}, fmt.Errorf("gguf: stub %s does not parse back: %w", dst, err)
	}
	d, err := back.HeaderDigest(ctx)
	if err != nil {
		return StubResult{}, err
	}
	if d != srcDigest || back.DataOffset != src.DataOffset {
		return StubResult{}, fmt.Errorf("%w: %s: header region differs from the source %s after writing", ErrStub, dst, src.Path)
	}
	if existing {
		same, err := sameBytes(ctx, tmp, dst, src.Size)
		if err != nil {
			return StubResult{}, fmt.Errorf("gguf: stub %s: comparing with the existing file: %w", dst, err)
		}
		if !same {
			return StubResult{}, fmt.Errorf("gguf: stub %s: %w (it holds other bytes; refusing to overwrite)", dst, os.ErrExist)
		}
		res.Unchanged = true
		return res, nil // the temp file is removed
	}
	if err := commitFile(tmp, tmpName, dst, cfg.replace); err != nil {
		if errors.Is(err, os.ErrExist) {
			return StubResult{}, fmt.Errorf("gguf: stub %s: %w (created concurrently; refusing to overwrite)", dst, os.ErrExist)
		}
		return StubResult{}, fmt.Errorf("gguf: stub %s: %w", dst, err)
	}
	committed = true
	return res, nil
}
