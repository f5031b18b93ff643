package calib

import (
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

// hessianVersion 3 holds the upper triangle as float32 (versions 1, the full float64 matrix, and 2,
// the float64 upper triangle, are no longer read: the calibrate stage versions that wrote them are
// gone, so no build feeds one to this reader).
const hessianVersion = 3

// hessianChunk is the byte buffer values are encoded into and decoded from (a multiple of 8).
const hessianChunk = 1 << 20

// triangle returns the number of values of the upper triangle (diagonal included) of a K x K matrix.
func triangle(k int) int64 { return int64(k) * int64(k+1) / 2 }

// WriteHessian checks the upper triangle of h (CheckUpper: the only part it reads) and writes it in
// the Hessian file format, streaming: row i's values H[i][i..K-1], i = 0..K-1, each rounded to the
// nearest float32 (a value beyond float32's range is an error, ErrNotFinite).
func WriteHessian(w io.Writer, h *Hessian) error {
	if err := h.CheckUpper(); err != nil {
		return err
	}
	hash := blake3.New()
	out := io.MultiWriter(w, hash)
	var b [headerSize]byte
	copy(b[:8], hessianMagic[:])
	binary.LittleEndian.PutUint32(b[8:], hessianVersion)
	binary.LittleEndian.PutUint32(b[12:], uint32(h.K))
	binary.LittleEndian.PutUint64(b[16:], uint64(h.Tokens))
	if _, err := out.Write(b[:]); err != nil {
		return fmt.Errorf("write hessian: %w", err)
	}
	buf := make([]byte, 0, hessianChunk)
	k := h.K
	for i := 0; i < k; i++ {
		row := h.Data[i*k+i : (i+1)*k]
		for len(row) > 0 {
			n := min(len(row), (cap(buf)-len(buf))/4)
			for j, x := range row[:n] {
				v := float32(x)
				if math.IsInf(float64(v), 0) {
					return fmt.Errorf("hessian at (%d,%d) = %v: beyond float32: %w", i, k-len(row)+j, x, ErrNotFinite)
				}
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			}
			row = row[n:]
			if len(buf) == cap(buf) {
				if _, err := out.Write(buf); err != nil {
					return fmt.Errorf("write hessian: %w", err)
				}
				buf = buf[:0]
			}
		}
	}
	if _, err := out.Write(buf); err != nil {
		return fmt.Errorf("write hessian: %w", err)
	}
	if _, err := w.Write(hash.Sum(nil)); err != nil {
		return fmt.Errorf("write hessian digest: %w", err)
	}
	return nil
}

// HessianFileSize returns the exact size in bytes of a Hessian file for a K x K Hessian: header,
// K·(K+1)/2 float32 values (the upper triangle) and the BLAKE3 digest.
func HessianFileSize(k int) int64 { return headerSize + triangle(k)*4 + digestSize }

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
// verifying header, length, digest and finiteness, and returns the full symmetric matrix (the lower
// triangle mirrored from the upper one the file holds). name labels errors.
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
		return nil, fmt.Errorf("%s: hessian version %d, want %d (the float32 upper triangle; re-run the calibrate node that wrote it): %w",
			name, binary.LittleEndian.Uint32(b[8:]), hessianVersion, ErrFormat)
	case binary.LittleEndian.Uint64(b[24:]) != 0:
		return nil, fmt.Errorf("%s: reserved header field not 0: %w", name, ErrFormat)
	}
	k := int(binary.LittleEndian.Uint32(b[12:]))
	tokens := binary.LittleEndian.Uint64(b[16:])
	if k == 0 || k > 1<<18 || tokens > math.MaxInt64 {
		return nil, fmt.Errorf("%s: K = %d, tokens = %d: want 0 < K <= %d: %w", name, k, tokens, 1<<18, ErrFormat)
	}
	if want := HessianFileSize(k); size != want {
		return nil, fmt.Errorf("%s: file is %d bytes, header field K = %d needs exactly %d (32-byte header, K·(K+1)/2·4 values, 32-byte digest): %w",
			name, size, k, want, ErrFormat)
	}
	h := &Hessian{K: k, Tokens: int64(tokens), Data: make([]float64, k*k)}
	sr := io.NewSectionReader(r, headerSize, triangle(k)*4)
	buf := make([]byte, hessianChunk)
	i, j := 0, 0 // the next value is H[i][j], j >= i
	for left := triangle(k); left > 0; {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		chunk := buf[:min(int64(len(buf)), 4*left)]
		if _, err := io.ReadFull(sr, chunk); err != nil {
			return nil, fmt.Errorf("%s: hessian row %d of %d: %w (truncated: %w)", name, i, k, err, ErrFormat)
		}
		hash.Write(chunk)
		left -= int64(len(chunk) / 4)
		for len(chunk) > 0 {
			row := h.Data[i*k+j : (i+1)*k]
			n := min(len(row), len(chunk)/4)
			for c := range row[:n] {
				row[c] = float64(math.Float32frombits(binary.LittleEndian.Uint32(chunk[4*c:])))
			}
			chunk = chunk[4*n:]
			if j += n; j == k {
				i++
				j = i
			}
		}
	}
	var sum [digestSize]byte
	if _, err := r.ReadAt(sum[:], size-digestSize); err != nil {
		return nil, fmt.Errorf("%s: hessian digest: %w (truncated: %w)", name, err, ErrFormat)
	}
	if got := hash.Sum(nil); !bytes.Equal(got, sum[:]) {
		return nil, fmt.Errorf("%s: BLAKE3 %x, file says %x: %w", name, got, sum, ErrCorrupt)
	}
	if err := h.CheckUpper(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	h.Symmetrize()
	return h, nil
}
