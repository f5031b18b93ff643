package gguf

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/zeebo/blake3"

	"orkpipe/ork/internal/parallel"
)

// TensorInfo describes one tensor: its name, ggml type, shape in GGUF ne order (Shape[0] is
// the row length) and where its data is.
type TensorInfo struct {
	Name  string
	Type  Type
	Shape []int64 // ne[0..n_dims); each >= 1
	// Offset is the data offset relative to the data section (File.DataOffset).
	Offset uint64
	// Size is the data size in bytes, without alignment padding.
	Size int64
}

// Elements is the number of elements (the product of Shape).
func (t TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// RowLen is ne[0], the number of elements per row (K of a matmul weight); 1 for a scalar.
func (t TensorInfo) RowLen() int64 {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Shape[0]
}

// Rows is the number of rows, the product of ne[1:] (N of a matmul weight).
func (t TensorInfo) Rows() int64 {
	n := int64(1)
	for _, d := range t.Shape[min(1, len(t.Shape)):] {
		n *= d
	}
	return n
}

// RowBytes is the byte size of one row.
func (t TensorInfo) RowBytes() int64 {
	rb, _ := t.Type.RowBytes(t.RowLen())
	return rb
}

// File is a parsed GGUF file: its header in memory, tensor data left in the file.
// A File is safe for concurrent reads.
type File struct {
	// Path is the file's path (or the name given to Parse); it labels errors.
	Path    string
	Version uint32
	// Alignment of the data section and of every tensor's data.
	Alignment int64
	// KV holds the metadata in file order.
	KV []KV
	// Tensors holds the tensor infos in file order.
	Tensors []TensorInfo
	// DataOffset is the absolute offset of the data section; bytes [0, DataOffset) are the
	// header region (header, KV, tensor infos, padding). A file without tensors has no data
	// section and no padding (as llama.cpp reads it): DataOffset is then the end of the tensor
	// infos, and any bytes after it are ignored.
	DataOffset int64
	// Size is the file size in bytes.
	Size int64

	r       io.ReaderAt
	closer  io.Closer
	kvIndex map[string]int
	tIndex  map[string]int
}

// Close closes the underlying file when the File was made by Open.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	return f.closer.Close()
}

// ReaderAt returns the reader tensor data is read from.
func (f *File) ReaderAt() io.ReaderAt { return f.r }

// Lookup returns the value of key.
func (f *File) Lookup(key string) (Value, bool) {
	i, ok := f.kvIndex[key]
	if !ok {
		return Value{}, false
	}
	return f.KV[i].Value, true
}

// Get returns the value of key, or an error wrapping ErrKeyNotFound naming the key and file.
func (f *File) Get(key string) (Value, error) {
	v, ok := f.Lookup(key)
	if !ok {
		return Value{}, fmt.Errorf("%s: %w: %q", f.Path, ErrKeyNotFound, key)
	}
	return v, nil
}

// Uint returns an integer value of key (see Value.Uint); errors name the key and file.
func (f *File) Uint(key string) (uint64, error) {
	v, err := f.Get(key)
	if err != nil {
		return 0, err
	}
	x, err := v.Uint()
	if err != nil {
		return 0, fmt.Errorf("%s: key %q: %w", f.Path, key, err)
	}
	return x, nil
}

// Float returns a float value of key; errors name the key and file.
func (f *File) Float(key string) (float64, error) {
	v, err := f.Get(key)
	if err != nil {
		return 0, err
	}
	x, err := v.Float()
	if err != nil {
		return 0, fmt.Errorf("%s: key %q: %w", f.Path, key, err)
	}
	return x, nil
}

// String returns a string value of key; errors name the key and file.
func (f *File) String(key string) (string, error) {
	v, err := f.Get(key)
	if err != nil {
		return "", err
	}
	x, err := v.Str()
	if err != nil {
		return "", fmt.Errorf("%s: key %q: %w", f.Path, key, err)
	}
	return x, nil
}

// Tensor returns the info of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, error) {
	i, ok := f.tIndex[name]
	if !ok {
		return TensorInfo{}, fmt.Errorf("%s: %w: %q", f.Path, ErrTensorNotFound, name)
	}
	return f.Tensors[i], nil
}

// TensorIndex returns the position of the named tensor in Tensors, or -1.
func (f *File) TensorIndex(name string) int {
	if i, ok := f.tIndex[name]; ok {
		return i
	}
	return -1
}

// DataRange returns the absolute [start, end) of a tensor's data (without padding).
func (f *File) DataRange(t TensorInfo) (start, end int64) {
	start = f.DataOffset + int64(t.Offset)
	return start, start + t.Size
}

// Section returns a reader of the tensor's raw data bytes.
func (f *File) Section(t TensorInfo) *io.SectionReader {
	start, _ := f.DataRange(t)
	return io.NewSectionReader(f.r, start, t.Size)
}

// ReadRaw reads the raw bytes of rows [first, first+len(p)/RowBytes) of t into p; len(p)
// must be a whole number of rows.
func (f *File) ReadRaw(ctx context.Context, t TensorInfo, first int64, p []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rb := t.RowBytes()
	if rb == 0 || int64(len(p))%rb != 0 {
		return fmt.Errorf("%s: tensor %q: buffer of %d bytes is not a whole number of %d-byte rows", f.Path, t.Name, len(p), rb)
	}
	n := int64(len(p)) / rb
	if first < 0 || n > t.Rows()-first {
		return fmt.Errorf("%s: tensor %q: rows [%d, %d) out of range (%d rows)", f.Path, t.Name, first, first+n, t.Rows())
	}
	start, _ := f.DataRange(t)
	off := start + first*rb
	if _, err := f.r.ReadAt(p, off); err != nil {
		return fmt.Errorf("%s: tensor %q: reading %d bytes at offset %d: %w", f.Path, t.Name, len(p), off, err)
	}
	return nil
}

// rawChunk is the size of ReadRows's chunks of the file (more when one row is longer).
const rawChunk = 1 << 20

var rawPool = sync.Pool{New: func() any { b := make([]byte, 0, rawChunk); return &b }}

// ReadRows dequantizes rows [first, first+len(dst)/RowLen) of t into dst as float32, reading
// the file in bounded chunks (never the whole tensor). len(dst) must be a whole number of rows.
// A tensor whose type CanDequantize rejects fails with an error naming the type and tensor.
func (f *File) ReadRows(ctx context.Context, t TensorInfo, first int64, dst []float32) error {
	if !CanDequantize(t.Type) {
		return fmt.Errorf("%w: %s: tensor %q has type %s, which orkpipe cannot dequantize (supported: %s)",
			ErrUnsupportedType, f.Path, t.Name, t.Type, dequantizableNames())
	}
	k := t.RowLen()
	if int64(len(dst))%k != 0 {
		return fmt.Errorf("%s: tensor %q: destination of %d floats is not a whole number of %d-element rows", f.Path, t.Name, len(dst), k)
	}
	n := int64(len(dst)) / k
	rb := t.RowBytes()
	bp := rawPool.Get().(*[]byte)
	defer rawPool.Put(bp)
	perChunk := max(1, int64(cap(*bp))/rb)
	for done := int64(0); done < n; {
		m := min(perChunk, n-done)
		if int64(cap(*bp)) < m*rb {
			*bp = make([]byte, m*rb)
		}
		raw := (*bp)[:m*rb]
		if err := f.ReadRaw(ctx, t, first+done, raw); err != nil {
			return err
		}
		if err := Dequantize(t.Type, raw, dst[done*k:(done+m)*k]); err != nil {
			return fmt.Errorf("%s: tensor %q: %w", f.Path, t.Name, err)
		}
		done += m
	}
	return nil
}

// ReadRowsOn is ReadRows with the rows cut in pieces of 1 MiB of the file (at least a row), read
// and dequantized on up to workers goroutines at once (the caller's among them; each holds one
// chunk buffer): for a matrix read whole into fresh memory, whose pages cost the kernel about as
// much as the dequantization. dst's values are ReadRows's. After a piece fails no other starts;
// the error is that piece's (joined with those of pieces already running that failed too).
func (f *File) ReadRowsOn(ctx context.Context, t TensorInfo, first int64, dst []float32, workers int) error {
	k := t.RowLen()
	if !CanDequantize(t.Type) || int64(len(dst))%k != 0 || workers < 2 {
		return f.ReadRows(ctx, t, first, dst) // its errors, or serial
	}
	n := int64(len(dst)) / k
	if first < 0 || n > t.Rows()-first {
		return fmt.Errorf("%s: tensor %q: rows [%d, %d) out of range (%d rows)", f.Path, t.Name, first, first+n, t.Rows())
	}
	piece := max(1, rawChunk/t.RowBytes())
	return parallel.ForErr(int((n+piece-1)/piece), workers, func(_, p int) error {
		lo := int64(p) * piece
		hi := min(n, lo+piece)
		return f.ReadRows(ctx, t, first+lo, dst[lo*k:hi*k])
	})
}

// HeaderDigest returns the BLAKE3-256 of the header region, bytes [0, DataOffset). Builds
// record it; a stub's header digest equals its source's. Use artifacts.DigestFromBytes for
// the "blake3:<hex>" form.
func (f *File) HeaderDigest(ctx context.Context) ([32]byte, error) {
	return digestRange(ctx, f.r, 0, f.DataOffset, f.Path)
}

func digestRange(ctx context.Context, r io.ReaderAt, off, n int64, name string) ([32]byte, error) {
	var sum [32]byte
	h := blake3.New()
	buf := make([]byte, 1<<20)
	for done := int64(0); done < n; {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		m := min(int64(len(buf)), n-done)
		if _, err := r.ReadAt(buf[:m], off+done); err != nil {
			return sum, fmt.Errorf("%s: reading header region at %d: %w", name, off+done, err)
		}
		h.Write(buf[:m])
		done += m
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// The keys llama.cpp's gguf-split writes into each shard of a model it splits across files.
const (
	SplitNoKey    = "split.no"    // the shard's number, from 0
	SplitCountKey = "split.count" // how many shards the model has
)

// Shard says whether f is one shard of a model llama-gguf-split wrote as several files (each holds
// some of the tensors; the first also the model's metadata): its number, from 0, and the number of
// shards. count is 0 for a file that is not a shard (no split.count, or a split.count of 1). A
// split.count or split.no that is not an unsigned integer, or a shard number not below the count,
// is an error wrapping ErrFormat that names the file and the key.
func (f *File) Shard() (no, count int, err error) {
	if _, ok := f.Lookup(SplitCountKey); !ok {
		return 0, 0, nil
	}
	c, err := f.Uint(SplitCountKey)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if c <= 1 {
		return 0, 0, nil
	}
	n, err := f.Uint(SplitNoKey)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if n >= c {
		return 0, 0, fmt.Errorf("%s: %w: key %q = %d, key %q = %d: want a shard number below the count", f.Path, ErrFormat, SplitNoKey, n, SplitCountKey, c)
	}
	return int(n), int(c), nil
}
