package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"

	"orkpipe/artifacts"
	"orkpipe/registry/oci"
)

// Compression is decided per file from a sample of its data: zstd is used only when the sample
// shrinks below compressWhenBelow of its size.
const (
	sampleWindows     = 8
	sampleWindowSize  = 128 << 10
	compressWhenBelow = 0.90
)

// newEncoder returns the one zstd configuration used for layers. Push hashes a part's compressed
// bytes in one pass and uploads them in another, so the encoder must be deterministic: one
// goroutine, fixed level, no dictionary.
func newEncoder(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
}

// localFile is a file being pushed: its layout plus where its bytes are.
type localFile struct {
	path string
	File
}

// mediaTypeFor classifies a file: JSON documents are docs, everything else (pack, stub) is weight.
func mediaTypeFor(name string) string {
	if strings.HasSuffix(name, ".json") {
		return MediaTypeDocRaw
	}
	return MediaTypeWeightRaw
}

// shouldCompress compresses up to sampleWindows windows spread over the data and reports whether
// zstd pays for this file.
func shouldCompress(f io.ReaderAt, exts []Extent) (bool, error) {
	total := extentsLen(exts)
	if total == 0 {
		return false, nil
	}
	var raw, packed int64
	var buf bytes.Buffer
	enc, err := newEncoder(&buf)
	if err != nil {
		return false, err
	}
	step := max(total/sampleWindows, 1)
	for at := int64(0); at < total; at += step {
		n := min(int64(sampleWindowSize), total-at)
		win := subExtents(exts, at, n)
		buf.Reset()
		enc.Reset(&buf)
		m, err := io.Copy(enc, extentsReader(f, win))
		if err != nil {
			return false, err
		}
		if err := enc.Close(); err != nil {
			return false, err
		}
		raw += m
		packed += int64(buf.Len())
	}
	return float64(packed) < compressWhenBelow*float64(raw), nil
}

// subExtents returns the extents covering bytes [at, at+n) of the concatenation of exts.
func subExtents(exts []Extent, at, n int64) []Extent {
	var out []Extent
	for _, e := range exts {
		if n == 0 {
			break
		}
		if at >= e.Len {
			at -= e.Len
			continue
		}
		k := min(e.Len-at, n)
		out = append(out, Extent{Off: e.Off + at, Len: k})
		n -= k
		at = 0
	}
	return out
}

// prepareFile finds the data extents of path, decides compression, cuts the data into parts and
// hashes everything in one sequential pass: the whole file (sha256 + BLAKE3, holes as zeros), each
// part's uncompressed bytes (diffID) and each part's stored bytes (layer digest).
func prepareFile(ctx context.Context, path string, o *options) (*localFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	exts, err := dataExtents(f, size)
	if err != nil {
		return nil, err
	}
	compress, err := shouldCompress(f, exts)
	if err != nil {
		return nil, fmt.Errorf("%s: sample for compression: %w", path, err)
	}
	name := filepath.Base(path)
	lf := &localFile{path: path, File: File{Name: name, MediaType: mediaTypeFor(name), Extra: map[string]string{}}}
	if o.annotator != nil {
		extra, err := o.annotator.FileAnnotations(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("%s: annotations: %w", path, err)
		}
		for k, v := range extra {
			if !strings.HasPrefix(k, "dev.orkpipe.") || layoutKeys[k] {
				return nil, fmt.Errorf("%s: annotator returned key %q: want a dev.orkpipe.* key that is not a layout key", path, k)
			}
			lf.Extra[k] = v
		}
	}
	mt := lf.MediaType
	if compress {
		mt += SuffixZstd
	}
	parts := splitExtents(exts, o.partSize)
	if len(parts) == 0 {
		parts = [][]Extent{nil} // a file without data still has one (empty) layer
	}
	// The whole-file digests and the per-part digests are computed concurrently: one goroutine
	// streams the file through sha256, BLAKE3 runs on all CPUs (artifacts.HashPath: 4 MiB subtrees,
	// holes as zeros), up to o.jobs others hash (and compress) parts. The file
	// must not change meanwhile: its identity (inode, size, mtime, ctime) is compared afterwards.
	lf.Parts = make([]Part, len(parts))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		h := newSHA256Hasher()
		if err := h.extents(gctx, f, size, exts); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		lf.Digests.Size, lf.Digests.SHA256 = h.n, h.digest()
		return nil
	})
	g.Go(func() error {
		obj, err := artifacts.HashPath(gctx, path)
		if err != nil {
			return err
		}
		lf.Digests.BLAKE3 = obj.Digest
		return nil
	})
	sem := make(chan struct{}, o.jobs)
	for i, pe := range parts {
		g.Go(func() error {
			select {
			case sem <- struct{}{}:
			case <-gctx.Done():
				return gctx.Err()
			}
			defer func() { <-sem }()
			p, err := hashPart(gctx, f, i, pe, compress)
			if err != nil {
				return fmt.Errorf("%s: part %d: %w", path, i, err)
			}
			p.Layer.MediaType = types.MediaType(mt)
			lf.Parts[i] = p
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if lf.Digests.Size != size {
		return nil, fmt.Errorf("%s: hashed %d bytes, file has %d", path, lf.Digests.Size, size)
	}
	if err := sameFile(path, st); err != nil {
		return nil, err
	}
	for i := range lf.Parts {
		if lf.Parts[i].Layer.Annotations, err = layerAnnotations(lf.File, lf.Parts[i]); err != nil {
			return nil, err
		}
	}
	return lf, nil
}

// hashPart computes the digests of one part: sha256 of its uncompressed bytes and, when compressed,
// sha256 and size of the zstd stream. The registry checks the stored sha256 of the bytes uploaded.
func hashPart(ctx context.Context, f io.ReaderAt, index int, exts []Extent, compress bool) (Part, error) {
	raw := sha256.New()
	stored := &hashCounter{h: raw} // uncompressed: the stored bytes are the raw bytes
	src := oci.CtxReader{Ctx: ctx, R: extentsReader(f, exts)}
	var n int64
	var err error
	if compress {
		stored = &hashCounter{h: sha256.New()}
		n, err = encodePart(stored, io.TeeReader(src, raw))
	} else {
		n, err = io.CopyBuffer(stored, src, make([]byte, 1<<20))
	}
	if err != nil {
		return Part{}, err
	}
	if n != extentsLen(exts) {
		return Part{}, fmt.Errorf("read %d bytes, extents hold %d: file shrank", n, extentsLen(exts))
	}
	return Part{
		Index: index, Extents: exts, RawSize: n, RawSHA256: "sha256:" + hex.EncodeToString(raw.Sum(nil)),
		Layer: v1.Descriptor{Size: stored.n, Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(stored.h.Sum(nil))}},
	}, nil
}

// sameFile fails if the file at path is no longer the one st describes (replaced, resized or
// written to: inode, size, mtime or ctime differ), naming what changed.
func sameFile(path string, st os.FileInfo) error {
	now, err := os.Stat(path)
	if err != nil {
		return err
	}
	a, b := st.Sys().(*syscall.Stat_t), now.Sys().(*syscall.Stat_t)
	if now.Size() != st.Size() || a.Ino != b.Ino || a.Dev != b.Dev || a.Mtim != b.Mtim || a.Ctim != b.Ctim {
		return fmt.Errorf("%s: changed while it was being hashed (size %d -> %d, mtime %v -> %v): nothing was pushed", path, st.Size(), now.Size(), st.ModTime(), now.ModTime())
	}
	return nil
}

// encodePart writes the zstd stream of src to dst and returns the bytes read from src. hashPart and
// openPart both go through it, so the bytes uploaded are exactly the bytes whose digest the manifest
// names: the encoder's output depends on how its input is chunked (Write vs ReadFrom, short reads at
// sparse-extent boundaries), so the chunking is fixed here — reads of at most 1 MiB, each written once.
func encodePart(dst io.Writer, src io.Reader) (int64, error) {
	enc, err := newEncoder(dst)
	if err != nil {
		return 0, err
	}
	n, err := io.CopyBuffer(struct{ io.Writer }{enc}, struct{ io.Reader }{src}, make([]byte, 1<<20))
	if cerr := enc.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// openPartAt returns the stored bytes of part p (compressed when the layer is) from offset off.
func (lf *localFile) openPartAt(p Part, off int64) (io.ReadCloser, error) {
	rc, err := lf.openPart(p)
	if err != nil || off == 0 {
		return rc, err
	}
	if _, err := io.CopyN(io.Discard, rc, off); err != nil {
		rc.Close()
		return nil, fmt.Errorf("%s part %d: skipping to %d: %w", lf.Name, p.Index, off, err)
	}
	return rc, nil
}

// openPart returns the stored bytes of part p (compressed when the layer is).
func (lf *localFile) openPart(p Part) (io.ReadCloser, error) {
	f, err := os.Open(lf.path)
	if err != nil {
		return nil, err
	}
	src := extentsReader(f, p.Extents)
	if !p.Compressed() {
		return struct {
			io.Reader
			io.Closer
		}{src, f}, nil
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := encodePart(pw, src)
		f.Close()
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// hashCounter feeds a sha256 and counts the bytes.
type hashCounter struct {
	h hash.Hash
	n int64
}

func (c *hashCounter) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}
