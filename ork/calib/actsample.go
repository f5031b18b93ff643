package calib

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/zeebo/blake3"

	"orkpipe/ork/model"
)

// ActSample is a bounded, deterministic sample of the activation rows one linear input site of a block
// saw during calibration: Rows rows of K values (float32, row-major in Data), rows 0, Stride, 2·Stride,
// ... of the Seen rows the site saw, in calibration order (sequence by sequence, token by token).
// The activation clip search (quant.SearchActClip) runs on it: it needs the activations themselves, which
// a Hessian does not keep.
type ActSample struct {
	K, Rows int
	Stride  int
	Seen    int64
	Data    []float32
}

// SampleStride returns the stride ActSampler takes rows with so that at most maxRows of the nSeq·seqLen
// rows of a site are kept: ceil(total/maxRows), raised until it has no factor in common with seqLen, so
// that the sampled token positions walk through every position of a sequence instead of repeating a few
// (a stride dividing seqLen would sample position 0, the BOS token, in every sequence).
func SampleStride(nSeq, seqLen, maxRows int) int {
	total := nSeq * seqLen
	s := max(1, (total+maxRows-1)/maxRows)
	for gcd(s, seqLen) != 1 {
		s++
	}
	return s
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// SampleRows returns the number of rows a sample with stride keeps of nSeq·seqLen rows.
func SampleRows(nSeq, seqLen, stride int) int { return (nSeq*seqLen + stride - 1) / stride }

// ActSampler is a model.Observer that keeps an ActSample of every sampled site of the blocks of a window:
// every site that is not per expert, except the MoE router's input (the router is never packed). Rows are
// selected by their index among the rows the site has seen, so the sample does not depend on how
// Capture batches sequences. CaptureUpperSampled fills it in the Hessians' pass.
type ActSampler struct {
	w       Window
	samples [][]*ActSample // [layer-start][input]; nil for a site not sampled
	err     error
}

// sampledSites lists the inputs of block layer that ActSampler samples.
func sampledSites(c *model.Config, layer int) []bool {
	sites := c.Sites(layer)
	out := make([]bool, len(sites))
	for i, s := range sites {
		out[i] = s.Experts == 0 && !(c.MoE() && model.Input(i) == model.InputRouter)
	}
	return out
}

// SampledSite reports whether ActSampler samples input in of block layer.
func SampledSite(c *model.Config, layer int, in model.Input) bool {
	s := sampledSites(c, layer)
	return int(in) >= 0 && int(in) < len(s) && s[in]
}

// NewActSampler prepares the samples of window w for nSeq sequences of seqLen tokens, at most maxRows
// rows per site (maxRows >= 1).
func NewActSampler(c *model.Config, w Window, nSeq, seqLen, maxRows int) (*ActSampler, error) {
	if err := w.check(c); err != nil {
		return nil, err
	}
	if nSeq < 1 || seqLen < 1 || maxRows < 1 {
		return nil, fmt.Errorf("activation sample of %d rows from %d sequences of %d: %w", maxRows, nSeq, seqLen, ErrShape)
	}
	stride := SampleStride(nSeq, seqLen, maxRows)
	rows := SampleRows(nSeq, seqLen, stride)
	s := &ActSampler{w: w, samples: make([][]*ActSample, w.End-w.Start)}
	for l := w.Start; l < w.End; l++ {
		sites := c.Sites(l)
		s.samples[l-w.Start] = make([]*ActSample, len(sites))
		for i, on := range sampledSites(c, l) {
			if on {
				k := sites[i].Width
				s.samples[l-w.Start][i] = &ActSample{K: k, Stride: stride, Data: make([]float32, 0, rows*k)}
			}
		}
	}
	return s, nil
}

// ActSampleMemory is what NewActSampler holds for window w: one sample of at most maxRows rows per
// sampled site of every block.
func ActSampleMemory(c *model.Config, w Window, nSeq, seqLen, maxRows int) int64 {
	if maxRows < 1 || nSeq < 1 || seqLen < 1 {
		return 0
	}
	rows := int64(SampleRows(nSeq, seqLen, SampleStride(nSeq, seqLen, maxRows)))
	var b int64
	for l := w.Start; l < w.End; l++ {
		sites := c.Sites(l)
		for i, on := range sampledSites(c, l) {
			if on {
				b += 4 * rows * int64(sites[i].Width)
			}
		}
	}
	return b
}

// Observe implements model.Observer: it copies the rows of x whose index among the rows the site has
// seen is a multiple of the stride.
func (s *ActSampler) Observe(layer int, in model.Input, x []float32) {
	if s.err != nil || layer < s.w.Start || layer >= s.w.End {
		return
	}
	row := s.samples[layer-s.w.Start]
	if int(in) < 0 || int(in) >= len(row) || row[in] == nil {
		return
	}
	a := row[in]
	if len(x)%a.K != 0 {
		s.err = fmt.Errorf("layer %d input %d: %d values are not rows of %d: %w", layer, in, len(x), a.K, ErrShape)
		return
	}
	n := int64(len(x) / a.K)
	st := int64(a.Stride)
	for r := (st - a.Seen%st) % st; r < n; r += st {
		a.Data = append(a.Data, x[r*int64(a.K):(r+1)*int64(a.K)]...)
	}
	a.Seen += n
	a.Rows = len(a.Data) / a.K
}

// CaptureUpperSampled is CaptureUpper that also feeds s (an ActSampler of window w) every site that is
// not per expert, in the same pass; check s.Err afterwards.
func CaptureUpperSampled(ctx context.Context, m *model.Model, w Window, in HiddenSource, out *HiddenWriter, s *ActSampler) (*Result, error) {
	if s == nil || !s.w.sameBlocks(w) {
		return nil, fmt.Errorf("activation sampler for another window than [%d, %d): %w", w.Start, w.End, ErrShape)
	}
	res, err := capture(ctx, m, w, in, out, finishUpper, s)
	if err == nil {
		err = s.Err()
	}
	return res, err
}

// Err returns the first error Observe met (rows of the wrong width), or nil.
func (s *ActSampler) Err() error { return s.err }

// Sample returns the sample of input in of block layer (nil when that site is not sampled).
func (s *ActSampler) Sample(layer int, in model.Input) *ActSample {
	if layer < s.w.Start || layer >= s.w.End {
		return nil
	}
	row := s.samples[layer-s.w.Start]
	if int(in) < 0 || int(in) >= len(row) {
		return nil
	}
	return row[in]
}

// Activation-sample file (one per sampled site), little-endian:
//
//	offset  size  field
//	0       8     magic "ORKACT\x00\x01"
//	8       4     u32 version (1)
//	12      4     u32 K (values per row)
//	16      4     u32 rows
//	20      4     u32 stride
//	24      8     u64 seen (rows the site saw; rows = ceil(seen/stride))
//	32      ...   rows × K float32, row-major, every value finite
//	end-32  32    BLAKE3-256 of every byte before it
//
// Readers check the header, the exact length, every value and the digest.
var actMagic = [8]byte{'O', 'R', 'K', 'A', 'C', 'T', 0, 1}

const actVersion = 1

// ActSampleFileSize is the exact size of the file of a sample of rows rows of k values.
func ActSampleFileSize(k, rows int) int64 { return headerSize + 4*int64(k)*int64(rows) + digestSize }

func (a *ActSample) check() error {
	switch {
	case a.K < 1 || a.K > 1<<24 || a.Rows < 1 || a.Stride < 1 || a.Seen < 1:
		return fmt.Errorf("activation sample: K %d, %d rows, stride %d, seen %d: %w", a.K, a.Rows, a.Stride, a.Seen, ErrFormat)
	case int64(a.Rows) != (a.Seen+int64(a.Stride)-1)/int64(a.Stride):
		return fmt.Errorf("activation sample: %d rows, but every %d-th of %d rows is %d: %w", a.Rows, a.Stride, a.Seen, (a.Seen+int64(a.Stride)-1)/int64(a.Stride), ErrFormat)
	case len(a.Data) != a.Rows*a.K:
		return fmt.Errorf("activation sample: %d values for %d rows of %d: %w", len(a.Data), a.Rows, a.K, ErrShape)
	}
	for i, v := range a.Data {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("activation sample: value %v at row %d col %d: %w", v, i/a.K, i%a.K, ErrNotFinite)
		}
	}
	return nil
}

// WriteActSample checks a and writes it in the activation-sample file format.
func WriteActSample(w io.Writer, a *ActSample) error {
	if err := a.check(); err != nil {
		return err
	}
	hash := blake3.New()
	out := bufio.NewWriterSize(io.MultiWriter(w, hash), 1<<20)
	var b [headerSize]byte
	copy(b[:8], actMagic[:])
	binary.LittleEndian.PutUint32(b[8:], actVersion)
	binary.LittleEndian.PutUint32(b[12:], uint32(a.K))
	binary.LittleEndian.PutUint32(b[16:], uint32(a.Rows))
	binary.LittleEndian.PutUint32(b[20:], uint32(a.Stride))
	binary.LittleEndian.PutUint64(b[24:], uint64(a.Seen))
	out.Write(b[:])
	var v [4]byte
	for _, x := range a.Data {
		binary.LittleEndian.PutUint32(v[:], math.Float32bits(x))
		out.Write(v[:])
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("write activation sample: %w", err)
	}
	if _, err := w.Write(hash.Sum(nil)); err != nil {
		return fmt.Errorf("write activation sample digest: %w", err)
	}
	return nil
}

// ReadActSample reads an activation-sample file of size bytes from r (name is used in errors). It
// believes the header's K and rows only when size is exactly the file they imply, so a damaged header
// never makes it allocate more than the file holds.
func ReadActSample(r io.Reader, size int64, name string) (*ActSample, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("activation sample %s: %s: %w", name, fmt.Sprintf(format, a...), ErrFormat)
	}
	if size < headerSize+digestSize {
		return nil, bad("%d bytes, shorter than header and digest", size)
	}
	hash := blake3.New()
	br := bufio.NewReaderSize(io.TeeReader(io.LimitReader(r, size-digestSize), hash), 1<<20)
	var b [headerSize]byte
	if _, err := io.ReadFull(br, b[:]); err != nil {
		return nil, bad("header: %v", err)
	}
	if [8]byte(b[:8]) != actMagic {
		return nil, bad("magic %q, want %q", b[:8], actMagic[:])
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != actVersion {
		return nil, bad("version %d, want %d", v, actVersion)
	}
	a := &ActSample{K: int(binary.LittleEndian.Uint32(b[12:])), Rows: int(binary.LittleEndian.Uint32(b[16:])),
		Stride: int(binary.LittleEndian.Uint32(b[20:])), Seen: int64(binary.LittleEndian.Uint64(b[24:]))}
	if a.K < 1 || a.Rows < 1 || ActSampleFileSize(a.K, a.Rows) != size {
		return nil, bad("K %d and %d rows make a %d-byte file, it has %d bytes", a.K, a.Rows, ActSampleFileSize(a.K, a.Rows), size)
	}
	a.Data = make([]float32, a.K*a.Rows)
	var v [4]byte
	for i := range a.Data {
		if _, err := io.ReadFull(br, v[:]); err != nil {
			return nil, bad("values: %v", err)
		}
		a.Data[i] = math.Float32frombits(binary.LittleEndian.Uint32(v[:]))
	}
	want := hash.Sum(nil)
	var got [digestSize]byte
	if _, err := io.ReadFull(r, got[:]); err != nil {
		return nil, bad("digest: %v", err)
	}
	if string(got[:]) != string(want) {
		return nil, fmt.Errorf("activation sample %s: BLAKE3 mismatch: %w", name, ErrCorrupt)
	}
	if err := a.check(); err != nil {
		return nil, fmt.Errorf("activation sample %s: %w", name, err)
	}
	return a, nil
}

// ReadActSampleFile opens path and reads it with ReadActSample.
func ReadActSampleFile(ctx context.Context, path string) (*ActSample, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("activation sample: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("activation sample %s: %w", path, err)
	}
	return ReadActSample(f, st.Size(), path)
}
