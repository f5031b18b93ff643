package nodeexec

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"orkpipe/artifacts"
	"orkpipe/artifacts/sparse"
	"orkpipe/stages"
)

// TarSuffix ends the name of an input in its tar form: <in>/<hex>/<hex>.tar (see the package doc).
const TarSuffix = ".tar"

// resolver finds the files of a node's inputs and tools in its input directory, unpacking those
// in tar form into a scratch directory of its own (made on first need, removed by close).
type resolver struct {
	inDir       string
	verify      bool
	scratchRoot string
	scratch     string
	unpacked    map[artifacts.Digest]string // a digest two inputs name is unpacked once
}

// resolve finds the file of every digest in set under r.inDir, by hex name.
func (r *resolver) resolve(ctx context.Context, set map[string]artifacts.Digest) (map[string]stages.File, error) {
	files := make(map[string]stages.File, len(set))
	for name, d := range set {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p, st, verified, err := r.find(ctx, name, d)
		if err != nil {
			return nil, err
		}
		if r.verify && !verified {
			obj, err := artifacts.HashPath(ctx, p)
			if err != nil {
				return nil, fmt.Errorf("hashing %q (%s): %w", name, p, err)
			}
			if obj.Digest != d {
				return nil, fmt.Errorf("%w: %q: %s hashes to %s, its name says %s", ErrBadNodeDir, name, p, obj.Digest, d)
			}
		}
		files[name] = stages.File{Path: p, Digest: d, Size: st.Size()}
	}
	return files, nil
}

// find returns the regular file of input name (digest d): <in>/<hex>, <in>/<hex>/<hex>, or the
// file unpacked from <in>/<hex>/<hex>.tar — which is always verified (verified is then true).
func (r *resolver) find(ctx context.Context, name string, d artifacts.Digest) (p string, st fs.FileInfo, verified bool, err error) {
	p = filepath.Join(r.inDir, d.Hex())
	st, err = os.Stat(p)
	if err == nil && st.IsDir() { // <hex>/<hex>: a directory mounted per input (Dagger)
		dir := p
		p = filepath.Join(dir, d.Hex())
		st, err = os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			if _, terr := os.Stat(p + TarSuffix); terr == nil {
				if p, err = r.unpack(ctx, name, d, p+TarSuffix); err != nil {
					return "", nil, false, err
				}
				st, err = os.Stat(p)
				verified = true
			}
		}
	}
	if err != nil {
		return "", nil, false, fmt.Errorf("%w: %q (%s): %v", ErrBadNodeDir, name, d, err)
	}
	if !st.Mode().IsRegular() {
		return "", nil, false, fmt.Errorf("%w: %q: %s is not a regular file", ErrBadNodeDir, name, p)
	}
	return p, st, verified, nil
}

// unpack writes the file of archive (the tar form of the input with digest d, package
// artifacts/sparse) into the scratch directory, holes kept, and returns its path once the file
// hashes to d (whatever WithVerifyInputs says: the archive is a transformation of the input, and
// its name alone proves nothing of its bytes).
func (r *resolver) unpack(ctx context.Context, name string, d artifacts.Digest, archive string) (string, error) {
	if p, ok := r.unpacked[d]; ok {
		return p, nil
	}
	if r.scratch == "" {
		if err := os.MkdirAll(r.scratchRoot, 0o755); err != nil {
			return "", fmt.Errorf("scratch directory for inputs in tar form: %w", err)
		}
		dir, err := os.MkdirTemp(r.scratchRoot, "orkpipe-inputs-")
		if err != nil {
			return "", fmt.Errorf("scratch directory for inputs in tar form: %w", err)
		}
		r.scratch = dir
	}
	src, err := os.Open(archive)
	if err != nil {
		return "", err
	}
	defer src.Close()
	p := filepath.Join(r.scratch, d.Hex())
	dst, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return "", err
	}
	e, err := sparse.ReadTar(ctx, src, dst)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("%w: %q: unpacking %s: %v", ErrBadNodeDir, name, archive, err)
	}
	if e.Name != d.Hex() {
		return "", fmt.Errorf("%w: %q: %s holds a file named %q, want %s", ErrBadNodeDir, name, archive, e.Name, d.Hex())
	}
	obj, err := artifacts.HashPath(ctx, p)
	if err != nil {
		return "", fmt.Errorf("hashing %q (%s, unpacked from %s): %w", name, p, archive, err)
	}
	if obj.Digest != d {
		return "", fmt.Errorf("%w: %q: the file unpacked from %s hashes to %s, its name says %s", ErrBadNodeDir, name, archive, obj.Digest, d)
	}
	if r.unpacked == nil {
		r.unpacked = map[artifacts.Digest]string{}
	}
	r.unpacked[d] = p
	return p, nil
}

// close removes the scratch directory.
func (r *resolver) close() error {
	if r.scratch == "" {
		return nil
	}
	if err := os.RemoveAll(r.scratch); err != nil {
		return fmt.Errorf("removing the inputs unpacked in %s: %w", r.scratch, err)
	}
	return nil
}
