package artifacts

import (
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"strings"

	"github.com/zeebo/blake3"

	"orkpipe/internal/blake3x"
)

// Algorithm is the only digest algorithm of the store.
const Algorithm = "blake3"

// DigestSize is the size in bytes of a BLAKE3-256 digest.
const DigestSize = 32

// Digest is the BLAKE3-256 of some bytes. Its text form is "blake3:<64 lowercase hex>".
// The zero value is not a valid digest; IsZero reports it.
type Digest struct {
	sum [DigestSize]byte
}

// ParseDigest parses "blake3:<64 lowercase hex>". Anything else (other algorithm,
// wrong length, upper-case or non-hex characters) is an error wrapping ErrInvalidDigest.
func ParseDigest(s string) (Digest, error) {
	alg, hexPart, ok := strings.Cut(s, ":")
	if !ok {
		return Digest{}, fmt.Errorf("%w %q: missing %q prefix", ErrInvalidDigest, s, Algorithm+":")
	}
	if alg != Algorithm {
		return Digest{}, fmt.Errorf("%w %q: algorithm %q, want %q", ErrInvalidDigest, s, alg, Algorithm)
	}
	return ParseHex(hexPart)
}

// ParseHex parses a bare 64-character lowercase hex BLAKE3 digest (as b3sum prints it).
func ParseHex(h string) (Digest, error) {
	if len(h) != 2*DigestSize {
		return Digest{}, fmt.Errorf("%w: %d hex characters, want %d", ErrInvalidDigest, len(h), 2*DigestSize)
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return Digest{}, fmt.Errorf("%w: character %q at %d is not lowercase hex", ErrInvalidDigest, c, i)
		}
	}
	var d Digest
	if _, err := hex.Decode(d.sum[:], []byte(h)); err != nil {
		return Digest{}, fmt.Errorf("%w: %v", ErrInvalidDigest, err)
	}
	return d, nil
}

// DigestFromBytes wraps a raw 32-byte BLAKE3 sum.
func DigestFromBytes(b []byte) (Digest, error) {
	if len(b) != DigestSize {
		return Digest{}, fmt.Errorf("%w: %d bytes, want %d", ErrInvalidDigest, len(b), DigestSize)
	}
	var d Digest
	copy(d.sum[:], b)
	return d, nil
}

// String returns "blake3:<hex>" (one allocation: a no-op rebuild's events name some 1,400 digests).
func (d Digest) String() string {
	var b [len(Algorithm) + 1 + 2*DigestSize]byte
	copy(b[:], Algorithm+":")
	hex.Encode(b[len(Algorithm)+1:], d.sum[:])
	return string(b[:])
}

// Hex returns the 64 hex characters without the algorithm prefix.
func (d Digest) Hex() string { return hex.EncodeToString(d.sum[:]) }

// Bytes returns a copy of the raw sum.
func (d Digest) Bytes() []byte { b := d.sum; return b[:] }

// IsZero reports whether d is the zero value (no digest).
func (d Digest) IsZero() bool { return d == Digest{} }

// MarshalText implements encoding.TextMarshaler.
func (d Digest) MarshalText() ([]byte, error) {
	if d.IsZero() {
		return nil, fmt.Errorf("%w: zero digest cannot be encoded", ErrInvalidDigest)
	}
	return []byte(d.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler; it validates like ParseDigest.
func (d *Digest) UnmarshalText(b []byte) error {
	p, err := ParseDigest(string(b))
	if err != nil {
		return err
	}
	*d = p
	return nil
}

// NewHasher returns a BLAKE3-256 hasher whose Sum matches Digest.
func NewHasher() hash.Hash { return blake3.New() }

// SumBytes returns the digest of b (blake3x.Sum256: the wide kernel above one chunk).
func SumBytes(b []byte) Digest { return Digest{sum: blake3x.Sum256(b)} }

// SumReader returns the digest and length of everything read from r.
func SumReader(r io.Reader) (Digest, int64, error) {
	h := blake3.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return Digest{}, n, err
	}
	var d Digest
	h.Sum(d.sum[:0])
	return d, n, nil
}

// DigestOf finalises a hasher returned by NewHasher.
func DigestOf(h hash.Hash) Digest {
	var d Digest
	h.Sum(d.sum[:0])
	return d
}
