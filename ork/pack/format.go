package pack

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/zeebo/blake3"
)

// Fixed sizes and magics (docs/orkpack.md 1.1, 1.2, 3).
const (
	HeaderSize      = PageSize
	FooterSize      = 104
	headerFields    = 80
	indexHeaderSize = 64
	recordFixed     = 176
	maxIndexLength  = 1 << 30
	// maxIndexOffset is the largest index offset whose file size (with the longest index) fits int64.
	maxIndexOffset = (math.MaxInt64 - maxIndexLength - FooterSize) &^ (PageSize - 1)
)

var (
	headerMagic = [8]byte{'O', 'R', 'K', 'P', 'A', 'C', 'K', 0}
	footerMagic = [8]byte{'O', 'R', 'K', 'P', 'E', 'N', 'D', 0}
	indexMagic  = [4]byte{'O', 'K', 'I', 'X'}
)

var le = binary.LittleEndian

// trailer is what header and footer both carry.
type trailer struct {
	version     uint32
	total       int64
	indexOffset int64
	indexLength int64
	indexDigest Digest
	count       uint32
}

// encodeHeader returns the full header page.
func encodeHeader(t trailer) []byte {
	b := make([]byte, HeaderSize)
	copy(b[0:8], headerMagic[:])
	le.PutUint32(b[8:], t.version)
	le.PutUint32(b[12:], PageSize)
	le.PutUint64(b[16:], uint64(t.total))
	le.PutUint64(b[24:], uint64(t.indexOffset))
	le.PutUint64(b[32:], uint64(t.indexLength))
	copy(b[40:72], t.indexDigest[:])
	le.PutUint32(b[72:], t.count)
	sum := blake3.Sum256(b[:headerFields])
	copy(b[80:112], sum[:])
	return b
}

// decodeHeader checks magic, version, checksum and zero padding of a header page.
func decodeHeader(b []byte) (trailer, error) {
	if len(b) < HeaderSize {
		return trailer{}, fmt.Errorf("%w: file has %d bytes, less than the %d-byte header", ErrTruncated, len(b), HeaderSize)
	}
	if [8]byte(b[0:8]) != headerMagic {
		return trailer{}, fmt.Errorf("%w: header magic is %q, want %q", ErrNotPack, b[0:8], headerMagic[:])
	}
	t := trailer{version: le.Uint32(b[8:])}
	if !Supported(t.version) {
		return trailer{}, fmt.Errorf("%w: header version %d (this build reads version %d)", ErrUnsupported, t.version, Version)
	}
	if sum := blake3.Sum256(b[:headerFields]); [32]byte(b[80:112]) != sum {
		return trailer{}, fmt.Errorf("%w: header checksum mismatch (header bytes 0..79 changed)", ErrCorrupt)
	}
	for i := 112; i < HeaderSize; i++ {
		if b[i] != 0 {
			return trailer{}, fmt.Errorf("%w: header padding byte %d is %#02x, want 0", ErrCorrupt, i, b[i])
		}
	}
	if p := le.Uint32(b[12:]); p != PageSize {
		return trailer{}, fmt.Errorf("%w: header page size %d, want %d", ErrCorrupt, p, PageSize)
	}
	if r := le.Uint32(b[76:]); r != 0 {
		return trailer{}, fmt.Errorf("%w: header reserved field is %d, want 0", ErrCorrupt, r)
	}
	if err := checkExtents(le.Uint64(b[16:]), le.Uint64(b[24:]), le.Uint64(b[32:])); err != nil {
		return trailer{}, fmt.Errorf("header: %w", err)
	}
	t.total = int64(le.Uint64(b[16:]))
	t.indexOffset = int64(le.Uint64(b[24:]))
	t.indexLength = int64(le.Uint64(b[32:]))
	t.indexDigest = Digest(b[40:72])
	t.count = le.Uint32(b[72:])
	return t, nil
}

// checkExtents validates the total length, index offset and index length as stored (unsigned, and printed
// so), naming the field that is out of range, or the relation between them: once it passes, each fits
// int64 and total = indexOffset + indexLength + FooterSize.
func checkExtents(total, indexOffset, indexLength uint64) error {
	switch {
	case indexOffset < HeaderSize || indexOffset%PageSize != 0 || indexOffset > maxIndexOffset:
		return fmt.Errorf("%w: index offset %d: want a multiple of %d from %d to %d", ErrCorrupt, indexOffset, PageSize, HeaderSize, uint64(maxIndexOffset))
	case indexLength < indexHeaderSize || indexLength > maxIndexLength:
		return fmt.Errorf("%w: index length %d: want %d..%d", ErrCorrupt, indexLength, indexHeaderSize, maxIndexLength)
	case total != indexOffset+indexLength+FooterSize:
		return fmt.Errorf("%w: total length %d: want index offset %d + index length %d + footer %d = %d", ErrCorrupt, total, indexOffset, indexLength, FooterSize, indexOffset+indexLength+FooterSize)
	}
	return nil
}

func encodeFooter(t trailer) []byte {
	b := make([]byte, FooterSize)
	le.PutUint64(b[0:], uint64(t.indexOffset))
	le.PutUint64(b[8:], uint64(t.indexLength))
	copy(b[16:48], t.indexDigest[:])
	le.PutUint64(b[48:], uint64(t.total))
	le.PutUint32(b[56:], t.version)
	le.PutUint32(b[60:], t.count)
	sum := blake3.Sum256(b[:64])
	copy(b[64:96], sum[:])
	copy(b[96:104], footerMagic[:])
	return b
}

// decodeFooter checks a footer on its own: magic, checksum, version and field arithmetic. Its errors wrap
// ErrCorrupt (the header was read: a footer that does not match is damage).
func decodeFooter(b []byte) (trailer, error) {
	if [8]byte(b[96:104]) != footerMagic {
		return trailer{}, fmt.Errorf("%w: footer magic missing (last 8 bytes are %q, want %q): the file is truncated or has bytes appended", ErrCorrupt, b[96:104], footerMagic[:])
	}
	if sum := blake3.Sum256(b[:64]); [32]byte(b[64:96]) != sum {
		return trailer{}, fmt.Errorf("%w: footer checksum mismatch", ErrCorrupt)
	}
	if v := le.Uint32(b[56:]); !Supported(v) {
		return trailer{}, fmt.Errorf("%w: footer version %d: want 1..%d (the header's version is read first)", ErrCorrupt, v, Version)
	}
	if err := checkExtents(le.Uint64(b[48:]), le.Uint64(b[0:]), le.Uint64(b[8:])); err != nil {
		return trailer{}, fmt.Errorf("footer: %w", err)
	}
	return trailer{
		indexOffset: int64(le.Uint64(b[0:])),
		indexLength: int64(le.Uint64(b[8:])),
		indexDigest: Digest(b[16:48]),
		total:       int64(le.Uint64(b[48:])),
		version:     le.Uint32(b[56:]),
		count:       le.Uint32(b[60:]),
	}, nil
}
