package calib

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"

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

// WriteHessian writes the upper triangle of h (the only part it reads) in the Hessian file format,
// streaming: row i's values H[i][i..K-1], i = 0..K-1, each rounded to the nearest float32. Every value
// is checked as it is converted (CheckUpper's conditions: finite, the diagonal non-negative; and within
// float32's range), so a bad Hessian is an error (ErrNotFinite) naming the first bad value of the
// lowest bad piece — after part of the file may have been written. GOMAXPROCS goroutines convert
// pieces of about hessianPiece bytes ahead of the writer, which writes and hashes them in order.
func WriteHessian(w io.Writer, h *Hessian) error {
	if h.K <= 0 || len(h.Data) != h.K*h.K {
		return fmt.Errorf("hessian K=%d with %d values (want K²): %w", h.K, len(h.Data), ErrShape)
	}
	if h.Tokens < 0 {
		return fmt.Errorf("hessian tokens %d: %w", h.Tokens, ErrShape)
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
	if err := convertPieces(h, func(p []byte) error {
		if _, err := out.Write(p); err != nil {
			return fmt.Errorf("write hessian: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	if _, err := w.Write(hash.Sum(nil)); err != nil {
		return fmt.Errorf("write hessian digest: %w", err)
	}
	return nil
}

// hessianPiece is the target size in bytes of one converted piece of rows (at least one row).
const hessianPiece = 4 << 20

// convertPieces cuts the rows of h's upper triangle into pieces of about hessianPiece bytes of
// float32, converts and checks them on GOMAXPROCS goroutines (piece p on goroutine p mod n, two buffers
// each) and calls write with each piece in row order. It returns the first error in that order: a
// piece's conversion error or write's.
func convertPieces(h *Hessian, write func([]byte) error) error {
	k := h.K
	var starts []int // first row of each piece, then k
	for i, size := 0, 0; i < k; i++ {
		if size == 0 {
			starts = append(starts, i)
		}
		if size += 4 * (k - i); size >= hessianPiece {
			size = 0
		}
	}
	starts = append(starts, k)
	// pieceBytes is the size of piece p: 4 bytes for each value of its rows' upper triangle.
	pieceBytes := func(p int) int { return 2 * ((starts[p+1] - starts[p]) * (2*k - starts[p] - starts[p+1] + 1)) }
	pieces := len(starts) - 1
	type result struct {
		buf []byte
		err error
	}
	n := max(1, min(pieces, runtime.GOMAXPROCS(0)))
	done := make(chan struct{})
	defer close(done)
	results := make([]chan result, n)
	free := make([]chan []byte, n)
	for g := range n {
		results[g], free[g] = make(chan result, 2), make(chan []byte, 2)
		free[g] <- nil
		free[g] <- nil
		go func() {
			for p := g; p < pieces; p += n {
				var buf []byte
				select {
				case buf = <-free[g]:
				case <-done:
					return
				}
				if cap(buf) < pieceBytes(p) {
					buf = make([]byte, 0, pieceBytes(p))
				}
				buf, err := convertRows(h, starts[p], starts[p+1], buf[:0])
				select {
				case results[g] <- result{buf, err}:
				case <-done:
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	for p := range pieces {
		r := <-results[p%n]
		if r.err != nil {
			return r.err
		}
		if err := write(r.buf); err != nil {
			return err
		}
		free[p%n] <- r.buf
	}
	return nil
}

// convertRows appends rows [i0, i1) of h's upper triangle to buf (which has room for them) as little-endian float32, checking
// each value: finite, within float32's range, and a non-negative diagonal.
func convertRows(h *Hessian, i0, i1 int, buf []byte) ([]byte, error) {
	k := h.K
	for i := i0; i < i1; i++ {
		row := h.Data[i*k+i : (i+1)*k]
		if row[0] < 0 {
			return buf, fmt.Errorf("hessian at (%d,%d) = %v: %w", i, i, row[0], ErrNotFinite)
		}
		n := len(buf)
		buf = buf[:n+4*len(row)]
		dst := buf[n:]
		for j, x := range row {
			v := float32(x)
			if v-v != 0 { // NaN or ±Inf as float32: x is not finite, or beyond float32's range
				if x-x != 0 {
					return buf[:n], fmt.Errorf("hessian at (%d,%d) = %v: %w", i, i+j, x, ErrNotFinite)
				}
				return buf[:n], fmt.Errorf("hessian at (%d,%d) = %v: beyond float32: %w", i, i+j, x, ErrNotFinite)
			}
			binary.LittleEndian.PutUint32(dst[4*j:], math.Float32bits(v))
		}
	}
	return buf, nil
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
