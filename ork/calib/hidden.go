package calib

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/zeebo/blake3"
)

var hiddenMagic = [8]byte{'O', 'R', 'K', 'H', 'I', 'D', 0, 1}

const (
	hiddenVersion = 1
	headerSize    = 32
	digestSize    = 32
)

// HiddenHeader describes a hidden-states file: NSeq sequences of SeqLen tokens of NEmbd values, the
// input of block Layer.
type HiddenHeader struct {
	NEmbd, SeqLen, NSeq, Layer int
}

func (h HiddenHeader) check() error {
	if h.NEmbd <= 0 || h.SeqLen <= 0 || h.NSeq <= 0 || h.Layer < 0 ||
		h.NEmbd > math.MaxUint32 || h.SeqLen > math.MaxUint32 || h.NSeq > math.MaxUint32 || h.Layer > math.MaxUint32 {
		return fmt.Errorf("hidden states header %+v: every count must be positive and fit in u32: %w", h, ErrShape)
	}
	// Bound the sizes before any product is formed in int: a sequence at most 2^36 bytes, the file 2^50.
	if seq := 4 * float64(h.NEmbd) * float64(h.SeqLen); seq > 1<<36 || seq*float64(h.NSeq) > 1<<50 {
		return fmt.Errorf("hidden states header %+v: %g bytes per sequence, %g in all: beyond the format's limits: %w", h, seq, seq*float64(h.NSeq), ErrShape)
	}
	return nil
}

// PayloadBytes is the size of the float32 payload.
func (h HiddenHeader) PayloadBytes() int64 {
	return 4 * int64(h.NEmbd) * int64(h.SeqLen) * int64(h.NSeq)
}

// FileBytes is the size of the whole file.
func (h HiddenHeader) FileBytes() int64 { return headerSize + h.PayloadBytes() + digestSize }

// HiddenWriter streams a hidden-states file sequence by sequence.
type HiddenWriter struct {
	hdr     HiddenHeader
	w       io.Writer
	hash    *blake3.Hasher
	written int
	buf     []byte
	err     error
}

// NewHiddenWriter writes the header to w and returns a writer expecting hdr.NSeq sequences.
func NewHiddenWriter(w io.Writer, hdr HiddenHeader) (*HiddenWriter, error) {
	if err := hdr.check(); err != nil {
		return nil, err
	}
	hw := &HiddenWriter{hdr: hdr, w: w, hash: blake3.New()}
	var b [headerSize]byte
	copy(b[:8], hiddenMagic[:])
	binary.LittleEndian.PutUint32(b[8:], hiddenVersion)
	binary.LittleEndian.PutUint32(b[12:], uint32(hdr.NEmbd))
	binary.LittleEndian.PutUint32(b[16:], uint32(hdr.SeqLen))
	binary.LittleEndian.PutUint32(b[20:], uint32(hdr.NSeq))
	binary.LittleEndian.PutUint32(b[24:], uint32(hdr.Layer))
	if err := hw.write(b[:]); err != nil {
		return nil, err
	}
	return hw, nil
}

// Header returns the header being written.
func (hw *HiddenWriter) Header() HiddenHeader { return hw.hdr }

func (hw *HiddenWriter) write(p []byte) error {
	if hw.err != nil {
		return hw.err
	}
	hw.hash.Write(p)
	if _, err := hw.w.Write(p); err != nil {
		hw.err = fmt.Errorf("write hidden states: %w", err)
	}
	return hw.err
}

// WriteSeq appends one sequence (SeqLen × NEmbd values).
func (hw *HiddenWriter) WriteSeq(h []float32) error {
	if len(h) != hw.hdr.SeqLen*hw.hdr.NEmbd {
		return fmt.Errorf("hidden states sequence of %d values, want %d × %d: %w", len(h), hw.hdr.SeqLen, hw.hdr.NEmbd, ErrShape)
	}
	if hw.written >= hw.hdr.NSeq {
		return fmt.Errorf("hidden states: sequence %d beyond the %d declared: %w", hw.written+1, hw.hdr.NSeq, ErrShape)
	}
	if cap(hw.buf) < 4*len(h) {
		hw.buf = make([]byte, 4*len(h))
	}
	b := hw.buf[:4*len(h)]
	for i, v := range h {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	if err := hw.write(b); err != nil {
		return err
	}
	hw.written++
	return nil
}

// Close checks that every declared sequence was written and appends the digest. It does not close the
// underlying writer.
func (hw *HiddenWriter) Close() error {
	if hw.err != nil {
		return hw.err
	}
	if hw.written != hw.hdr.NSeq {
		return fmt.Errorf("hidden states: %d of %d sequences written: %w", hw.written, hw.hdr.NSeq, ErrShape)
	}
	sum := hw.hash.Sum(nil)
	if _, err := hw.w.Write(sum); err != nil {
		return fmt.Errorf("write hidden states digest: %w", err)
	}
	return nil
}

// HiddenSource yields hidden states one sequence at a time.
type HiddenSource interface {
	// Header describes the sequences.
	Header() HiddenHeader
	// Next returns the next sequence (SeqLen × NEmbd values, valid until the next call), or io.EOF
	// after the last one once the source has verified itself.
	Next(ctx context.Context) ([]float32, error)
}

// HiddenReader reads a hidden-states file sequence by sequence, verifying its digest at the end.
type HiddenReader struct {
	name string
	hdr  HiddenHeader
	r    io.Reader
	hash *blake3.Hasher
	read int
	buf  []byte
	vals []float32
	done bool
}

// NewHiddenReader reads and checks the header; name labels errors.
func NewHiddenReader(r io.Reader, name string) (*HiddenReader, error) {
	var b [headerSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return nil, fmt.Errorf("%s: hidden states header: %w (%w)", name, err, ErrFormat)
	}
	if !bytes.Equal(b[:8], hiddenMagic[:]) {
		return nil, fmt.Errorf("%s: magic %q, want %q: %w", name, b[:8], hiddenMagic[:], ErrFormat)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != hiddenVersion {
		return nil, fmt.Errorf("%s: hidden states version %d, want %d: %w", name, v, hiddenVersion, ErrFormat)
	}
	if v := binary.LittleEndian.Uint32(b[28:]); v != 0 {
		return nil, fmt.Errorf("%s: reserved header field = %d, want 0: %w", name, v, ErrFormat)
	}
	hdr := HiddenHeader{
		NEmbd:  int(binary.LittleEndian.Uint32(b[12:])),
		SeqLen: int(binary.LittleEndian.Uint32(b[16:])),
		NSeq:   int(binary.LittleEndian.Uint32(b[20:])),
		Layer:  int(binary.LittleEndian.Uint32(b[24:])),
	}
	if err := hdr.check(); err != nil {
		return nil, fmt.Errorf("%s: %w (%w)", name, err, ErrFormat)
	}
	h := &HiddenReader{name: name, hdr: hdr, r: r, hash: blake3.New()}
	h.hash.Write(b[:])
	return h, nil
}

// Header implements HiddenSource.
func (h *HiddenReader) Header() HiddenHeader { return h.hdr }

// Next implements HiddenSource.
func (h *HiddenReader) Next(ctx context.Context) ([]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if h.read == h.hdr.NSeq {
		if !h.done {
			if err := h.finish(); err != nil {
				return nil, err
			}
			h.done = true
		}
		return nil, io.EOF
	}
	n := h.hdr.SeqLen * h.hdr.NEmbd
	if h.vals == nil {
		// Grow with the bytes actually read: a header announcing a huge sequence in a short file fails
		// at its end instead of allocating what it announces.
		buf, err := readGrowing(h.r, 4*int64(n))
		if err != nil {
			return nil, fmt.Errorf("%s: sequence %d of %d: %w (truncated: %w)", h.name, h.read, h.hdr.NSeq, err, ErrFormat)
		}
		h.buf, h.vals = buf, make([]float32, n)
	} else if _, err := io.ReadFull(h.r, h.buf); err != nil {
		return nil, fmt.Errorf("%s: sequence %d of %d: %w (truncated: %w)", h.name, h.read, h.hdr.NSeq, err, ErrFormat)
	}
	h.hash.Write(h.buf)
	for i := range h.vals {
		h.vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(h.buf[4*i:]))
	}
	h.read++
	return h.vals, nil
}

func (h *HiddenReader) finish() error {
	var sum [digestSize]byte
	if _, err := io.ReadFull(h.r, sum[:]); err != nil {
		return fmt.Errorf("%s: digest: %w (truncated: %w)", h.name, err, ErrFormat)
	}
	var extra [1]byte
	if n, _ := h.r.Read(extra[:]); n != 0 {
		return fmt.Errorf("%s: bytes after the digest: %w", h.name, ErrFormat)
	}
	if got := h.hash.Sum(nil); !bytes.Equal(got, sum[:]) {
		return fmt.Errorf("%s: BLAKE3 %x, file says %x: %w", h.name, got, sum, ErrCorrupt)
	}
	return nil
}

// readGrowing reads exactly n bytes, growing its buffer in chunks of at most 1 MiB as data arrives.
func readGrowing(r io.Reader, n int64) ([]byte, error) {
	const chunk = 1 << 20
	buf := make([]byte, 0, min(n, chunk))
	for int64(len(buf)) < n {
		m := min(n-int64(len(buf)), chunk)
		start := len(buf)
		buf = append(buf, make([]byte, m)...)
		if _, err := io.ReadFull(r, buf[start:]); err != nil {
			return nil, err
		}
	}
	return buf, nil
}
