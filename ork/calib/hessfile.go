package calib

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"

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

// ReadHessian reads a Hessian file whole (the matrix is needed whole), verifying header, length, digest,
// finiteness and symmetry. name labels errors.
func ReadHessian(r io.Reader, name string) (*Hessian, error) {
	hash := blake3.New()
	br := bufio.NewReaderSize(r, 1<<20)
	var b [headerSize]byte
	if _, err := io.ReadFull(br, b[:]); err != nil {
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
	h := &Hessian{K: k, Tokens: int64(tokens)}
	row := make([]byte, 8*k)
	for i := 0; i < k; i++ {
		if _, err := io.ReadFull(br, row); err != nil {
			return nil, fmt.Errorf("%s: hessian row %d of %d: %w (truncated: %w)", name, i, k, err, ErrFormat)
		}
		hash.Write(row)
		for j := 0; j < k; j++ { // grows with the bytes actually read, never from K alone
			h.Data = append(h.Data, math.Float64frombits(binary.LittleEndian.Uint64(row[8*j:])))
		}
	}
	var sum [digestSize]byte
	if _, err := io.ReadFull(br, sum[:]); err != nil {
		return nil, fmt.Errorf("%s: hessian digest: %w (truncated: %w)", name, err, ErrFormat)
	}
	if n, _ := br.Read(make([]byte, 1)); n != 0 {
		return nil, fmt.Errorf("%s: bytes after the hessian digest: %w", name, ErrFormat)
	}
	if got := hash.Sum(nil); !bytes.Equal(got, sum[:]) {
		return nil, fmt.Errorf("%s: BLAKE3 %x, file says %x: %w", name, got, sum, ErrCorrupt)
	}
	if err := h.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return h, nil
}
