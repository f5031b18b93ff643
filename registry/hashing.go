package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"orkpipe/artifacts"
	"orkpipe/registry/oci"
)

// FileDigests identify the whole, uncompressed content of one file (holes read as zeros). Push
// always records both digests; a manifest written by another tool may lack either (SHA256 "",
// BLAKE3 zero), and pull then verifies with what is there (see Verification).
type FileDigests struct {
	Size   int64            `json:"size"`
	SHA256 string           `json:"sha256"` // "sha256:<hex>", or "" when the manifest has none
	BLAKE3 artifacts.Digest `json:"blake3"` // zero when the manifest has none
}

// Verification names the whole-file check a pull applied to a file, after every part matched its
// sha256 layer digest and diffID.
type Verification string

const (
	// VerifiedBLAKE3: the assembled file's BLAKE3 (merged from the pieces the verified parts hashed
	// from the bytes they wrote, see b3tree.go) equals the manifest's dev.orkpipe.file.blake3. The
	// file is then byte-identical to what the pusher hashed, so its sha256 equals
	// dev.orkpipe.file.sha256 by implication; that sha256 is not recomputed.
	VerifiedBLAKE3 Verification = "blake3"
	// VerifiedSHA256: the manifest has no BLAKE3 annotation; the assembled file's sha256,
	// recomputed from disk, equals its dev.orkpipe.file.sha256.
	VerifiedSHA256 Verification = "sha256"
	// VerifiedParts: the manifest has neither whole-file annotation; the per-part digests (and the
	// manifest's extents and size) are the only check.
	VerifiedParts Verification = "parts"
)

// verification returns the whole-file check pull applies to a file with digests d.
func (d FileDigests) verification() Verification {
	switch {
	case !d.BLAKE3.IsZero():
		return VerifiedBLAKE3
	case d.SHA256 != "":
		return VerifiedSHA256
	}
	return VerifiedParts
}

// matches reports whether got (both digests computed) agrees with every whole-file digest d
// records. With neither digest recorded nothing can vouch for a whole file: never a match.
func (d FileDigests) matches(got FileDigests) bool {
	if d.verification() == VerifiedParts {
		return false
	}
	return d.Size == got.Size && (d.SHA256 == "" || d.SHA256 == got.SHA256) && (d.BLAKE3.IsZero() || d.BLAKE3 == got.BLAKE3)
}

// zeroBuf feeds holes to hashers without reading them from the kernel.
var zeroBuf = make([]byte, 1<<20)

// hashPath hashes the file at path (sha256 and BLAKE3 at once), skipping its holes.
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
	// sha256 on this goroutine, BLAKE3 on all CPUs beside it (as push's pass 1 does).
	var obj artifacts.Object
	b3done := make(chan error, 1)
	go func() {
		var err error
		obj, err = artifacts.HashPath(ctx, path)
		b3done <- err
	}()
	h := newSHA256Hasher()
	serr := h.extents(ctx, f, st.Size(), exts)
	berr := <-b3done
	if err := errors.Join(serr, berr); err != nil {
		return FileDigests{}, fmt.Errorf("hash %s: %w", path, err)
	}
	if obj.Size != h.n {
		return FileDigests{}, fmt.Errorf("hash %s: changed while hashing (%d then %d bytes)", path, h.n, obj.Size)
	}
	return FileDigests{Size: h.n, SHA256: h.digest(), BLAKE3: obj.Digest}, nil
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
		n, err := io.CopyBuffer(s.h, oci.CtxReader{Ctx: ctx, R: io.NewSectionReader(f, e.Off, e.Len)}, s.chunk)
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

// blake3String is d's text form, or "" for the zero digest (a manifest without the annotation).
func blake3String(d artifacts.Digest) string {
	if d.IsZero() {
		return ""
	}
	return d.String()
}

// orNone spells an absent digest in a message.
func orNone(s string) string {
	if s == "" {
		return "(no digest recorded)"
	}
	return s
}
