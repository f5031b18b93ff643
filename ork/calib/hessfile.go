package calib

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/zeebo/blake3"
)

var hessianMagic = [8]byte{'O', 'R', 'K', 'H', 'E', 'S', 0, 1}

const hessianVersion = 1

// WriteHessian checks h and writes it in the Hessian file format, streaming.
func WriteHessian(w io.Writer, h *Hessian) error {
	if err := h.Check(); err != nil {
		return err
	}
	hash := blake3.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, hash), 1<<20)
	var b [headerSize]byte
	copy(b[:8], hessianMagic[:])
	binary.LittleEndian.PutUint32(b[8:], hessianVersion)
	binary.LittleEndian.PutUint32(b[12:], uint32(h.K))
	binary.LittleEndian.PutUint64(b[16:], uint64(h.Tokens))
	bw.Write(b[:])
	var v [8]byte
	for _, x := range h.Data {
		binary.LittleEndian.PutUint64(v[:], math.Float64bits(x))
		bw.Write(v[:])
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write hessian: %w", err)
	}
	if _, err := w.Write(hash.Sum(nil)); err != nil {
		return fmt.Errorf("write hessian digest: %w", err)
	}
	return nil
}

// HessianFileSize returns the exact size in bytes of a Hessian file for a K x K Hessian: header,
// K·K float64 values and the BLAKE3 digest.
func HessianFileSize(k int) int64 { return headerSize + int64(k)*int64(k)*8 + digestSize }

// ReadHessianFile opens path and reads it with ReadHessian.
func ReadHessianFile(ctx context.Context, path string) (*Hessian, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hessian: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("hessian: %w", err)
	}
	return ReadHessian(ctx, f, st.Size(), path)
}

// ReadHessian reads a Hessian file of size bytes from r whole (the matrix is needed whole),
// verifying header, length, digest, finiteness and symmetry. name labels errors.
//
// Memory: the header's K is believed only when size is exactly HessianFileSize(K), so a lying
// header cannot make it allocate more than the file holds; then the K x K matrix is allocated
// once (K²·8 bytes) and filled in place through a 1 MiB buffer — no growth, no copy. ctx is
// checked between chunks.
func ReadHessian(ctx context.Context, r io.ReaderAt, size int64, name string) (*Hessian, error) {
	hash := blake3.New()
	var b [headerSize]byte
	if _, err := r.ReadAt(b[:], 0); err != nil {
		return nil, fmt.Errorf("%s: hessian header: %w (%w)", name, err, ErrFormat)
	}
	hash.Write(b[:])
	switch {
	case !bytes.Equal(b[:8], hessianMagic[:]):
		return nil, fmt.Errorf("%s: magic %q, want %q: %w", name, b[:8], hessianMagic[:], ErrFormat)
	case binary.LittleEndian.Uint32(b[8:]) != hessianVersion:
		return nil, fmt.Errorf("%s: hessian version %d, want %d: %w", name, binary.LittleEndian.Uint32(b[8:]), hessianVersion, ErrFormat)
	case binary.LittleEndian.Uint64(b[24:]) != 0:
		return nil, fmt.Errorf("%s: reserved header field not 0: %w", name, ErrFormat)
	}
	k := int(binary.LittleEndian.Uint32(b[12:]))
	tokens := binary.LittleEndian.Uint64(b[16:])
	if k == 0 || k > 1<<18 || tokens > math.MaxInt64 {
		return nil, fmt.Errorf("%s: K = %d, tokens = %d: want 0 < K <= %d: %w", name, k, tokens, 1<<18, ErrFormat)
	}
	if want := HessianFileSize(k); size != want {
		return nil, fmt.Errorf("%s: file is %d bytes, header field K = %d needs exactly %d (32-byte header, K²·8 values, 32-byte digest): %w",
			name, size, k, want, ErrFormat)
	}
	h := &Hessian{K: k, Tokens: int64(tokens), Data: make([]float64, k*k)}
	sr := io.NewSectionReader(r, headerSize, int64(k)*int64(k)*8)
	buf := make([]byte, 1<<20) // a multiple of 8
	for done := 0; done < len(h.Data); {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		chunk := buf[:min(len(buf), 8*(len(h.Data)-done))]
		if _, err := io.ReadFull(sr, chunk); err != nil {
			return nil, fmt.Errorf("%s: hessian value %d of %d: %w (truncated: %w)", name, done, len(h.Data), err, ErrFormat)
		}
		hash.Write(chunk)
		for j := range len(chunk) / 8 {
			h.Data[done+j] = math.Float64frombits(binary.LittleEndian.Uint64(chunk[8*j:]))
		}
		done += len(chunk) / 8
	}
	var sum [digestSize]byte
	if _, err := r.ReadAt(sum[:], size-digestSize); err != nil {
		return nil, fmt.Errorf("%s: hessian digest: %w (truncated: %w)", name, err, ErrFormat)
	}
	if got := hash.Sum(nil); !bytes.Equal(got, sum[:]) {
		return nil, fmt.Errorf("%s: BLAKE3 %x, file says %x: %w", name, got, sum, ErrCorrupt)
	}
	if err := h.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return h, nil
}
