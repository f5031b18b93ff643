package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"

	"orkpipe/artifacts"
)

// FileDigests identify the whole, uncompressed content of one file (holes read as zeros).
type FileDigests struct {
	Size   int64            `json:"size"`
	SHA256 string           `json:"sha256"` // "sha256:<hex>"
	BLAKE3 artifacts.Digest `json:"blake3"`
}

// zeroBuf feeds holes to hashers without reading them from the kernel.
var zeroBuf = make([]byte, 1<<20)

// ctxReader makes a long copy honour ctx between reads.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// fileHasher hashes a file's logical content: sha256 and BLAKE3 side by side.
type fileHasher struct {
	sha   hash.Hash
	b3    hash.Hash
	w     io.Writer
	n     int64
	chunk []byte
}

func newFileHasher() *fileHasher {
	h := &fileHasher{sha: sha256.New(), b3: artifacts.NewHasher(), chunk: make([]byte, 1<<20)}
	h.w = io.MultiWriter(h.sha, h.b3)
	return h
}

// zeros feeds n zero bytes (a hole).
func (h *fileHasher) zeros(n int64) {
	for n > 0 {
		k := min(n, int64(len(zeroBuf)))
		h.w.Write(zeroBuf[:k]) // hash writes never fail
		n -= k
		h.n += k
	}
}

// data feeds the bytes of r.
func (h *fileHasher) data(ctx context.Context, r io.Reader) error {
	n, err := io.CopyBuffer(h.w, ctxReader{ctx, r}, h.chunk)
	h.n += n
	return err
}

func (h *fileHasher) digests() FileDigests {
	return FileDigests{Size: h.n, SHA256: "sha256:" + hex.EncodeToString(h.sha.Sum(nil)), BLAKE3: artifacts.DigestOf(h.b3)}
}

// hashExtents hashes a file of size bytes whose data lives in exts (everything else is zeros).
func hashExtents(ctx context.Context, f io.ReaderAt, size int64, exts []Extent) (FileDigests, error) {
	h := newFileHasher()
	pos := int64(0)
	for _, e := range exts {
		h.zeros(e.Off - pos)
		if err := h.data(ctx, io.NewSectionReader(f, e.Off, e.Len)); err != nil {
			return FileDigests{}, err
		}
		pos = e.End()
	}
	h.zeros(size - pos)
	return h.digests(), nil
}

// hashPath hashes the file at path, skipping its holes.
func hashPath(ctx context.Context, path string) (FileDigests, error) {
	f, err := os.Open(path)
	if err != nil {
		return FileDigests{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return FileDigests{}, err
	}
	exts, err := dataExtents(f, st.Size())
	if err != nil {
		return FileDigests{}, err
	}
	d, err := hashExtents(ctx, f, st.Size(), exts)
	if err != nil {
		return FileDigests{}, fmt.Errorf("hash %s: %w", path, err)
	}
	return d, nil
}

// sha256Hasher hashes a file's logical content with sha256 alone (BLAKE3 runs elsewhere, in parallel).
type sha256Hasher struct {
	h     hash.Hash
	n     int64
	chunk []byte
}

func newSHA256Hasher() *sha256Hasher {
	return &sha256Hasher{h: sha256.New(), chunk: make([]byte, 1<<20)}
}

// extents feeds the file of size bytes whose data lives in exts (everything else is zeros).
func (s *sha256Hasher) extents(ctx context.Context, f io.ReaderAt, size int64, exts []Extent) error {
	zeros := func(n int64) {
		for n > 0 {
			k := min(n, int64(len(zeroBuf)))
			s.h.Write(zeroBuf[:k])
			n -= k
			s.n += k
		}
	}
	for _, e := range exts {
		zeros(e.Off - s.n)
		n, err := io.CopyBuffer(s.h, ctxReader{ctx, io.NewSectionReader(f, e.Off, e.Len)}, s.chunk)
		s.n += n
		if err != nil {
			return err
		}
		if n != e.Len {
			return fmt.Errorf("read %d bytes of the extent at %d, want %d: file shrank", n, e.Off, e.Len)
		}
	}
	zeros(size - s.n)
	return nil
}

func (s *sha256Hasher) digest() string { return "sha256:" + hex.EncodeToString(s.h.Sum(nil)) }
