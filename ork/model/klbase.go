package model

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
)

// KL-divergence base file (llama.cpp tools/perplexity/perplexity.cpp at 3f545bec: written by
// llama-perplexity --kl-divergence-base FILE, read by --kl-divergence). Little-endian:
//
//	offset        size                      field
//	0             8                         magic "_logits_"
//	8             4                         i32 n_ctx: tokens per chunk
//	12            4                         i32 n_vocab
//	16            4                         i32 n_chunk
//	20            4·n_chunk·n_ctx           i32 tokens: the first n_chunk·n_ctx tokens of the text's
//	                                        tokenization (BOS first where the vocabulary adds it); a
//	                                        chunk's first token as in the text, not replaced by BOS
//	20+4·n_chunk·n_ctx                      per chunk, per scored position j = n_ctx/2 .. n_ctx−2
//	              n_chunk·(n_ctx−1−n_ctx/2)·nv·2   (predicting token j+1), nv = 2·⌈n_vocab/2⌉ + 4 u16:
//	                                        f32 scale, f32 min_log_prob (the first four u16), then
//	                                        n_vocab u16 q_i (and one 0 when n_vocab is odd)
//
// The base model's log-probability of token i is scale·q_i + min_log_prob: the logits were clamped
// below at max−16 (q_i = 0) and quantized to 65535 steps between there and the maximum. The file is
// exactly as long as its header says; nothing may follow.

// klMagic is the first 8 bytes of a KL-divergence base file.
const klMagic = "_logits_"

// KLBase is an open KL-divergence base file. Its rows are read a chunk at a time.
type KLBase struct {
	Path   string
	Ctx    int     // n_ctx
	NVocab int     // n_vocab
	NChunk int     // n_chunk
	Tokens []int32 // n_chunk·n_ctx tokens

	r       io.ReaderAt
	closer  io.Closer
	dataOff int64
}

// RowValues is nv, the number of u16 values of one scored position's record.
func (b *KLBase) RowValues() int { return 2*((b.NVocab+1)/2) + 4 }

// Rows is the number of scored positions per chunk (n_ctx − 1 − n_ctx/2).
func (b *KLBase) Rows() int { return b.Ctx - 1 - b.Ctx/2 }

// OpenKLBase opens and validates the header and size of a KL-divergence base file.
func OpenKLBase(path string) (*KLBase, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	b, err := ReadKLBase(f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	b.closer = f
	return b, nil
}

// Close closes the file OpenKLBase opened.
func (b *KLBase) Close() error {
	if b.closer == nil {
		return nil
	}
	return b.closer.Close()
}

// maxKLCtx and maxKLVocab bound the header's sizes (llama.cpp's context and vocabulary sizes are far
// below), so that every size computed from them fits an int64.
const (
	maxKLCtx   = 1 << 24
	maxKLVocab = 1 << 24
)

// ReadKLBase reads the header and tokens of a KL-divergence base file of size bytes from r and checks
// that its size is exactly what the header implies; name is used in errors.
func ReadKLBase(r io.ReaderAt, size int64, name string) (*KLBase, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("KL-divergence base %s: %s: %w", name, fmt.Sprintf(format, a...), ErrBadKLBase)
	}
	var hdr [20]byte
	if size < int64(len(hdr)) {
		return nil, bad("%d bytes: shorter than the 20-byte header", size)
	}
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		return nil, fmt.Errorf("KL-divergence base %s: read header: %w", name, err)
	}
	if string(hdr[:8]) != klMagic {
		return nil, bad("magic %q, want %q (a file written by llama-perplexity --kl-divergence-base)", hdr[:8], klMagic)
	}
	nCtx := int32(binary.LittleEndian.Uint32(hdr[8:]))
	nVocab := int32(binary.LittleEndian.Uint32(hdr[12:]))
	nChunk := int32(binary.LittleEndian.Uint32(hdr[16:]))
	switch {
	case nCtx < 4 || nCtx > maxKLCtx:
		return nil, bad("n_ctx %d: want 4..%d", nCtx, maxKLCtx)
	case nVocab < 1 || nVocab > maxKLVocab:
		return nil, bad("n_vocab %d: want 1..%d", nVocab, maxKLVocab)
	case nChunk < 1:
		return nil, bad("n_chunk %d: want >= 1", nChunk)
	}
	b := &KLBase{Path: name, Ctx: int(nCtx), NVocab: int(nVocab), NChunk: int(nChunk), r: r}
	nTok := int64(b.NChunk) * int64(b.Ctx)
	b.dataOff = 20 + 4*nTok
	want := b.dataOff + int64(b.NChunk)*int64(b.Rows())*int64(b.RowValues())*2
	if size != want {
		return nil, bad("%d bytes, the header (n_ctx %d, n_vocab %d, n_chunk %d) implies %d", size, b.Ctx, b.NVocab, b.NChunk, want)
	}
	raw := make([]byte, 4*nTok)
	if _, err := r.ReadAt(raw, 20); err != nil {
		return nil, fmt.Errorf("KL-divergence base %s: read tokens: %w", name, err)
	}
	b.Tokens = make([]int32, nTok)
	for i := range b.Tokens {
		t := int32(binary.LittleEndian.Uint32(raw[4*i:]))
		if t < 0 || t >= nVocab {
			return nil, bad("tokens[%d] = %d: outside the vocabulary of %d", i, t, nVocab)
		}
		b.Tokens[i] = t
	}
	return b, nil
}

// KLRow is one scored position of a base file: the base model's log-probabilities are
// Scale·Q[i] + MinLogProb.
type KLRow struct {
	Scale, MinLogProb float32
	Q                 []uint16 // NVocab values
}

// LogProb returns the base model's log-probability of token i.
func (r *KLRow) LogProb(i int) float32 { return r.Scale*float32(r.Q[i]) + r.MinLogProb }

// ReadChunk reads the Rows() records of chunk c into rows (len Rows(), each Q of NVocab values; buf
// holds Rows()·RowValues()·2 bytes) and checks each record's scale (finite, >= 0) and minimum
// log-probability (finite, <= 0).
func (b *KLBase) ReadChunk(c int, rows []KLRow, buf []byte) error {
	if c < 0 || c >= b.NChunk {
		return fmt.Errorf("KL-divergence base %s: chunk %d outside [0, %d): %w", b.Path, c, b.NChunk, ErrBadKLBase)
	}
	nv, n := b.RowValues(), b.Rows()
	if len(rows) != n || len(buf) != n*nv*2 {
		return fmt.Errorf("KL-divergence base %s: %d rows and %d bytes given for a chunk of %d rows of %d values: %w", b.Path, len(rows), len(buf), n, nv, ErrBadModel)
	}
	if _, err := b.r.ReadAt(buf, b.dataOff+int64(c)*int64(n*nv*2)); err != nil {
		return fmt.Errorf("KL-divergence base %s: read chunk %d: %w", b.Path, c, err)
	}
	for j := range rows {
		rec := buf[j*nv*2 : (j+1)*nv*2]
		r := &rows[j]
		r.Scale = math.Float32frombits(binary.LittleEndian.Uint32(rec))
		r.MinLogProb = math.Float32frombits(binary.LittleEndian.Uint32(rec[4:]))
		if math.IsNaN(float64(r.Scale)) || math.IsInf(float64(r.Scale), 0) || r.Scale < 0 {
			return fmt.Errorf("KL-divergence base %s: chunk %d, position %d: scale %v: want finite and >= 0: %w", b.Path, c, b.Ctx/2+j, r.Scale, ErrBadKLBase)
		}
		if math.IsNaN(float64(r.MinLogProb)) || math.IsInf(float64(r.MinLogProb), 0) || r.MinLogProb > 0 {
			return fmt.Errorf("KL-divergence base %s: chunk %d, position %d: min_log_prob %v: want finite and <= 0: %w", b.Path, c, b.Ctx/2+j, r.MinLogProb, ErrBadKLBase)
		}
		if cap(r.Q) < b.NVocab {
			r.Q = make([]uint16, b.NVocab)
		}
		r.Q = r.Q[:b.NVocab]
		for i := range r.Q {
			r.Q[i] = binary.LittleEndian.Uint16(rec[8+2*i:])
		}
	}
	return nil
}
