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
	"sort"
	"sync"

	"github.com/zeebo/blake3"

	"orkpipe/internal/hugebuf"
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
// is checked as it is encoded (EncodeHessian), so a bad Hessian is an error (ErrNotFinite) naming the
// first bad value of the lowest bad piece — after part of the file may have been written. GOMAXPROCS
// goroutines encode pieces of hessianPiece bytes ahead of the writer, which writes and hashes them in
// order. (The calibrate stage writes its files with EncodeHessian directly: pieces encoded into a
// mapping of the file and hashed on every core.)
func WriteHessian(w io.Writer, h *Hessian) error {
	if err := h.checkShape(); err != nil {
		return err
	}
	hash := blake3.New()
	out := io.MultiWriter(w, hash)
	if err := encodePieces(h, func(p []byte) error {
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

func (h *Hessian) checkShape() error {
	if h.K <= 0 || len(h.Data) != h.K*h.K {
		return fmt.Errorf("hessian K=%d with %d values (want K²): %w", h.K, len(h.Data), ErrShape)
	}
	if h.Tokens < 0 {
		return fmt.Errorf("hessian tokens %d: %w", h.Tokens, ErrShape)
	}
	return nil
}

// hessianPiece is the size in bytes of one encoded piece of WriteHessian (the last may be shorter).
const hessianPiece = 4 << 20

// encodePieces cuts the HessianDataSize bytes of h's file into pieces of hessianPiece bytes, encodes
// them on GOMAXPROCS goroutines (piece p on goroutine p mod n, two buffers each) and calls write with
// each piece in order. It returns the first error in that order: a piece's encoding error or write's.
func encodePieces(h *Hessian, write func([]byte) error) error {
	size := HessianDataSize(h.K)
	pieces := int((size + hessianPiece - 1) / hessianPiece)
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
				off := int64(p) * hessianPiece
				if buf == nil {
					buf = make([]byte, hessianPiece)
				}
				buf = buf[:min(hessianPiece, size-off)]
				err := EncodeHessian(h, buf, off)
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
		free[p%n] <- r.buf[:cap(r.buf)]
	}
	return nil
}

// HessianDataSize is the number of bytes of the Hessian file of a K x K Hessian that its digest covers:
// the header and the K·(K+1)/2 float32 values (HessianFileSize less the 32-byte digest).
func HessianDataSize(k int) int64 { return headerSize + triangle(k)*4 }

// rowStart returns the index, among the upper triangle's values of a K x K matrix in row order, of
// H[i][i]: the values of rows 0..i-1.
func rowStart(k, i int) int64 { return int64(i)*int64(k) - int64(i)*int64(i-1)/2 }

// upperAt returns the place H[i][j] (j >= i) of value v of the upper triangle in row order: i is the
// last row whose first value, H[i][i], is at or before v.
func upperAt(k int, v int64) (i, j int) {
	i = sort.Search(k, func(i int) bool { return rowStart(k, i+1) > v })
	return i, i + int(v-rowStart(k, i))
}

// EncodeHessian fills dst with bytes [off, off+len(dst)) of the Hessian file of h: of its first
// HessianDataSize(h.K) bytes (header and values; the digest, BLAKE3-256 of all of them, follows). off
// and len(dst) must be multiples of 4, so that every value is encoded whole by one call. Each value is
// checked as it is encoded: finite, within float32's range, and a non-negative diagonal; the error
// (ErrNotFinite) names the first bad value of the range. Ranges are independent, so a file can be
// encoded in pieces concurrently, and any cut gives the same bytes.
func EncodeHessian(h *Hessian, dst []byte, off int64) error {
	dst, i, j, err := encodeHeader(h, dst, off, true)
	if err != nil || len(dst) == 0 {
		return err
	}
	k := h.K
	for len(dst) > 0 {
		row := h.Data[i*k+j : (i+1)*k]
		n := min(len(row), len(dst)/4)
		if err := encodeValues(i, j, row[:n], dst[:4*n]); err != nil {
			return err
		}
		dst = dst[4*n:]
		i++
		j = i
	}
	return nil
}

// encodeHeader checks the range [off, off+len(dst)) as EncodeHessian states, writes the part of the
// header it holds and returns the rest of dst, which starts at value H[i][j] (nothing left when the
// range ends in the header). withData: the values come from h.Data, whose shape is checked too; else
// only K and Tokens are (an Encoder's pending update without earlier ones).
func encodeHeader(h *Hessian, dst []byte, off int64, withData bool) (rest []byte, i, j int, err error) {
	switch {
	case withData:
		if err := h.checkShape(); err != nil {
			return nil, 0, 0, err
		}
	case h.K <= 0 || h.Tokens < 0:
		return nil, 0, 0, fmt.Errorf("hessian K=%d, tokens %d: %w", h.K, h.Tokens, ErrShape)
	}
	k := h.K
	if off < 0 || off%4 != 0 || len(dst)%4 != 0 || off+int64(len(dst)) > HessianDataSize(k) {
		return nil, 0, 0, fmt.Errorf("hessian K=%d: bytes [%d, %d) of a file of %d data bytes, in whole 4-byte values: %w",
			k, off, off+int64(len(dst)), HessianDataSize(k), ErrShape)
	}
	if off < headerSize {
		var b [headerSize]byte
		copy(b[:8], hessianMagic[:])
		binary.LittleEndian.PutUint32(b[8:], hessianVersion)
		binary.LittleEndian.PutUint32(b[12:], uint32(k))
		binary.LittleEndian.PutUint64(b[16:], uint64(h.Tokens))
		n := copy(dst, b[off:])
		dst, off = dst[n:], headerSize
	}
	if len(dst) == 0 {
		return dst, 0, 0, nil
	}
	i, j = upperAt(k, (off-headerSize)/4)
	return dst, i, j, nil
}

// encodeValues writes the values H[i][j0..j0+len(row)) as little-endian float32 into dst, checking
// each: by the AVX2 kernel where the CPU has one (blocks of eight whose float32s are finite), by the Go
// loop for the rest, with the same bits (TestEncodeValuesKernel, FuzzEncodeValues).
func encodeValues(i, j0 int, row []float64, dst []byte) error {
	if j0 == i && row[0] < 0 {
		return fmt.Errorf("hessian at (%d,%d) = %v: %w", i, i, row[0], ErrNotFinite)
	}
	dst = dst[:4*len(row)]
	done := f32Kernel(dst, row) // the finite prefix, eight values at a time; the rest (and errors) below
	for c := done; c < len(row); c++ {
		x := row[c]
		v := float32(x)
		if v-v != 0 { // NaN or ±Inf as float32: x is not finite, or beyond float32's range
			if x-x != 0 {
				return fmt.Errorf("hessian at (%d,%d) = %v: %w", i, j0+c, x, ErrNotFinite)
			}
			return fmt.Errorf("hessian at (%d,%d) = %v: beyond float32: %w", i, j0+c, x, ErrNotFinite)
		}
		binary.LittleEndian.PutUint32(dst[4*c:], math.Float32bits(v))
	}
	return nil
}

// HessianFileSize returns the exact size in bytes of a Hessian file for a K x K Hessian: header,
// K·(K+1)/2 float32 values (the upper triangle) and the BLAKE3 digest.
func HessianFileSize(k int) int64 { return headerSize + triangle(k)*4 + digestSize }

// ReadHessianFile opens path and reads it with ReadHessian.
func ReadHessianFile(ctx context.Context, path string) (*Hessian, error) {
	return readHessianFile(ctx, path, func(n int) []float64 { return make([]float64, n) })
}

// ReadHessianFileHuge is ReadHessianFile with the matrix outside the Go heap (internal/hugebuf), for
// a caller that holds it to the end and can say when it is done: free releases it, after which
// h.Data must not be used (free may be called more than once; on error there is nothing to free).
// A mapping advised for huge pages takes one fault per 2 MiB where the heap takes one per 4 KiB:
// the 27B ffn_down's 2.4 GB matrix took 9.0-9.5 s to read on a PVM guest (~600,000 faults, 6-7 s
// of them in the kernel), 1.7-6.1 s this way (docs/performance-log.md, "Session 39").
func ReadHessianFileHuge(ctx context.Context, path string) (h *Hessian, free func(), err error) {
	release := func() {}
	h, err = readHessianFile(ctx, path, func(n int) []float64 {
		b, f := hugebuf.Make[float64](n)
		release = f
		return b
	})
	if err != nil {
		release()
		return nil, nil, err
	}
	return h, release, nil
}

// readHessianFile is ReadHessianFile with the K x K matrix from alloc (n zeroed values).
func readHessianFile(ctx context.Context, path string, alloc func(n int) []float64) (*Hessian, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hessian: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("hessian: %w", err)
	}
	return readHessian(ctx, f, st.Size(), path, alloc)
}

// ReadHessian reads a Hessian file of size bytes from r whole (the matrix is needed whole),
// verifying header, length, digest and finiteness, and returns the full symmetric matrix (the lower
// triangle mirrored from the upper one the file holds). name labels errors.
//
// Memory: the header's K is believed only when size is exactly HessianFileSize(K), so a lying
// header cannot make it allocate more than the file holds; then the K x K matrix is allocated
// once (K²·8 bytes) and filled in place from chunks of 1 MiB (at most five: see readUpper) — no
// growth, no copy. ctx is checked between chunks.
func ReadHessian(ctx context.Context, r io.ReaderAt, size int64, name string) (*Hessian, error) {
	return readHessian(ctx, r, size, name, func(n int) []float64 { return make([]float64, n) })
}

// readHessian is ReadHessian with the K x K matrix from alloc (n zeroed values), called once the
// header has been checked against size.
func readHessian(ctx context.Context, r io.ReaderAt, size int64, name string, alloc func(n int) []float64) (*Hessian, error) {
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
	h := &Hessian{K: k, Tokens: int64(tokens), Data: alloc(k * k)}
	if err := readUpper(ctx, io.NewSectionReader(r, headerSize, triangle(k)*4), h, hash, name); err != nil {
		return nil, err
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

// readUpper fills the upper triangle of h (row after row, each from its diagonal) from the float32
// values of r, writing every byte it reads to hash in order. The caller's goroutine reads and hashes a
// chunk of hessianChunk bytes at a time; GOMAXPROCS other goroutines, at most four, convert the
// chunks read into h.Data, so that the conversion and the first writes to a fresh matrix (a page
// fault per page) run beside the read. ctx is checked between chunks. Memory: one chunk more than
// there are converters.
func readUpper(ctx context.Context, r io.Reader, h *Hessian, hash io.Writer, name string) error {
	k, total := h.K, triangle(h.K)
	type piece struct {
		buf []byte
		v   int64 // the index of its first value in the triangle, row after row
	}
	workers := min(runtime.GOMAXPROCS(0), 4)
	pieces := make(chan piece)
	free := make(chan []byte, workers+1)
	for range workers + 1 {
		free <- nil // allocated when first taken
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range pieces {
				decodeUpper(h, p.buf, p.v)
				free <- p.buf
			}
		}()
	}
	var err error
	for v := int64(0); v < total; {
		if err = ctx.Err(); err != nil {
			err = fmt.Errorf("%s: %w", name, err)
			break
		}
		buf := <-free
		if buf == nil {
			buf = make([]byte, hessianChunk)
		}
		chunk := buf[:min(hessianChunk, 4*(total-v))]
		if _, e := io.ReadFull(r, chunk); e != nil {
			i, _ := upperAt(k, v)
			err = fmt.Errorf("%s: hessian row %d of %d: %w (truncated: %w)", name, i, k, e, ErrFormat)
			break
		}
		hash.Write(chunk)
		pieces <- piece{chunk, v}
		v += int64(len(chunk) / 4)
	}
	close(pieces)
	wg.Wait()
	return err
}

// decodeUpper writes the little-endian float32 values of chunk, the first of them value v of the
// triangle (upperAt), into h.Data as float64 (exact).
func decodeUpper(h *Hessian, chunk []byte, v int64) {
	k := h.K
	i, j := upperAt(k, v)
	for len(chunk) > 0 {
		row := h.Data[i*k+j : (i+1)*k]
		n := min(len(row), len(chunk)/4)
		for c := range row[:n] {
			row[c] = float64(math.Float32frombits(binary.LittleEndian.Uint32(chunk[4*c:])))
		}
		chunk = chunk[4*n:]
		i++
		j = i
	}
}
