package gguf

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
)

const (
	// Magic is the 4-byte file signature.
	Magic = "GGUF"
	// Version is the version Write emits.
	Version = 3
	// DefaultAlignment is the data alignment when general.alignment is absent.
	DefaultAlignment = 32
	// AlignmentKey is the KV key that sets the data alignment (a u32 power of two).
	AlignmentKey = "general.alignment"
	// MaxNameLen is one more than the longest tensor name llama.cpp accepts (GGML_MAX_NAME).
	MaxNameLen = 64
	// MaxDims is the largest n_dims llama.cpp accepts (GGML_MAX_DIMS).
	MaxDims = 4

	// minTensorInfo is the fewest bytes a tensor info takes: an empty name's length, n_dims 0,
	// type and offset.
	minTensorInfo = 8 + 4 + 4 + 8

	// maxQuotedName is the longest too-long tensor name read to be quoted in the error; a
	// longer one is refused by its length, unread.
	maxQuotedName = 1 << 10
)

// Supported reports whether a GGUF version can be read (2 and 3). It is the one version
// predicate every reader uses.
func Supported(version uint32) bool { return version == 2 || version == 3 }

// Open opens and parses the GGUF file at path. The returned File reads tensor data from the
// open file by pread; Close it when done.
func Open(ctx context.Context, path string) (*File, error) {
	// Refused before the open, which for a named pipe would block until a writer comes.
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s: not a regular file", ErrFormat, path)
	}
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	st, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if !st.Mode().IsRegular() {
		fd.Close()
		return nil, fmt.Errorf("%w: %s: not a regular file", ErrFormat, path)
	}
	f, err := Parse(ctx, fd, st.Size(), path)
	if err != nil {
		fd.Close()
		return nil, err
	}
	f.closer = fd
	return f, nil
}

// Parse parses the header of the size-byte GGUF in r and validates it as llama.cpp does,
// including that every tensor's data lies inside the size bytes. name labels errors (a path).
// The File keeps r to read tensor data.
func Parse(ctx context.Context, r io.ReaderAt, size int64, name string) (*File, error) {
	return parse(ctx, r, size, name, true)
}

func parse(ctx context.Context, r io.ReaderAt, size int64, name string, checkData bool) (*File, error) {
	d := newDecoder(name, r, size)
	magic := d.buf(4)
	if err := d.read(magic, at("magic")); err != nil {
		return nil, err
	}
	if string(magic) != Magic {
		return nil, d.errAt(0, "bad magic %q, expected %q: not a GGUF file", magic, Magic)
	}
	version, err := d.u32(at("version"))
	if err != nil {
		return nil, err
	}
	if err := checkVersion(name, version); err != nil {
		return nil, err
	}
	countOff := d.pos
	nTensors, err := d.count(at("tensor count"), minTensorInfo)
	if err != nil {
		return nil, err
	}
	if nTensors > MaxTensors {
		return nil, fmt.Errorf("%w: %s: offset %d: tensor count %d is past the limit of %d tensors (gguf.MaxTensors)",
			ErrLimit, name, countOff, nTensors, MaxTensors)
	}
	nKV, err := d.count(at("KV count"), 8+4+1)
	if err != nil {
		return nil, err
	}
	f := &File{Path: name, Version: version, Alignment: DefaultAlignment, Size: size, r: r,
		kvIndex: make(map[string]int, min(nKV, 1024)), tIndex: make(map[string]int, min(nTensors, 1<<14))}

	d.enter(kvLimit)
	for i := 0; i < nKV; i++ {
		if i%256 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		kvOff := d.pos
		kv, err := d.kv(i)
		if err != nil {
			return nil, err
		}
		if j, dup := f.kvIndex[kv.Key]; dup {
			return nil, d.errAt(kvOff, "duplicate key %q (KV %d and KV %d)", kv.Key, j, i)
		}
		f.kvIndex[kv.Key] = len(f.KV)
		f.KV = append(f.KV, kv)
	}
	d.leave()
	if j, ok := f.kvIndex[AlignmentKey]; ok {
		v := f.KV[j].Value
		if v.Type() != ValueUint32 {
			return nil, fmt.Errorf("%w: %s: key %s is %s, expected u32", ErrFormat, name, AlignmentKey, v.Type())
		}
		a := int64(v.bits)
		if a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("%w: %s: key %s = %d is not a power of two", ErrFormat, name, AlignmentKey, a)
		}
		f.Alignment = a
	}

	d.enter(tensorInfoLimit)
	for i := 0; i < nTensors; i++ {
		if i%256 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		tiOff := d.pos
		ti, err := d.tensorInfo(i)
		if err != nil {
			return nil, err
		}
		if j, dup := f.tIndex[ti.Name]; dup {
			return nil, d.errAt(tiOff, "duplicate tensor name %q (tensor infos %d and %d)", ti.Name, j, i)
		}
		f.tIndex[ti.Name] = len(f.Tensors)
		f.Tensors = append(grow(f.Tensors, nTensors, 1024), ti)
	}
	d.leave()
	// The data section starts at the next multiple of the alignment; a file without tensors has
	// no data section, and llama.cpp (gguf_init_from_file) then takes it to start right after the
	// tensor infos, without padding: vocab-only files end there.
	f.DataOffset = d.pos
	if nTensors > 0 {
		f.DataOffset = alignUp(d.pos, f.Alignment)
	}
	if f.DataOffset < 0 {
		return nil, fmt.Errorf("%w: %s: data offset overflows", ErrFormat, name)
	}
	if err := f.checkLayout(checkData); err != nil {
		return nil, err
	}
	return f, nil
}

func checkVersion(name string, v uint32) error {
	switch {
	case Supported(v):
		return nil
	case v == 0:
		return fmt.Errorf("%w: %s: version 0 is invalid", ErrVersion, name)
	case v == 1:
		return fmt.Errorf("%w: %s: GGUF v1 is no longer supported (llama.cpp rejects it); re-convert the model", ErrVersion, name)
	case v&0xFFFF == 0:
		return fmt.Errorf("%w: %s: version field 0x%08x looks byte-swapped: the file is big-endian, only little-endian GGUF is supported", ErrVersion, name, v)
	default:
		return fmt.Errorf("%w: %s: version %d is newer than supported (2 and 3)", ErrVersion, name, v)
	}
}

// kv reads KV pair i.
func (d *decoder) kv(i int) (KV, error) {
	off := d.pos
	key, err := d.str(atIdx("KV %d key", i))
	if err != nil {
		return KV{}, err
	}
	if key == "" {
		return KV{}, d.errAt(off, "KV %d has an empty key", i)
	}
	toff := d.pos
	t32, err := d.u32(atName("type of key %q", key))
	if err != nil {
		return KV{}, err
	}
	t := ValueType(t32)
	if !t.Valid() {
		return KV{}, d.errAt(toff, "key %q has unknown value type %d (valid: 0..12)", key, t32)
	}
	what := atName("value of key %q", key)
	var v Value
	if t == ValueArray {
		v, err = d.array(what)
	} else {
		v, err = d.scalar(t, what)
	}
	if err != nil {
		return KV{}, err
	}
	return KV{Key: key, Value: v}, nil
}

// tensorInfo reads and validates tensor info i (everything but the offset sequence).
func (d *decoder) tensorInfo(i int) (TensorInfo, error) {
	off := d.pos
	// A name longer than maxQuotedName is refused unread: only a name this short is worth quoting.
	n, err := d.strLenUpTo(atIdx("tensor info %d name", i), maxQuotedName, func(off int64, n uint64) error {
		return d.errAt(off, "tensor info %d: name is too long (%d bytes, the limit is %d)", i, n, MaxNameLen-1)
	})
	if err != nil {
		return TensorInfo{}, err
	}
	name, err := d.strBody(n, atIdx("tensor info %d name", i))
	if err != nil {
		return TensorInfo{}, err
	}
	if len(name) >= MaxNameLen {
		return TensorInfo{}, d.errAt(off, "tensor info %d: name %q is too long (%d bytes, the limit is %d)", i, name, len(name), MaxNameLen-1)
	}
	noff := d.pos
	nDims, err := d.u32(atName("n_dims of tensor %q", name))
	if err != nil {
		return TensorInfo{}, err
	}
	if nDims > MaxDims {
		return TensorInfo{}, d.errAt(noff, "tensor %q has n_dims %d, more than %d", name, nDims, MaxDims)
	}
	ti := TensorInfo{Name: name, Shape: make([]int64, nDims)}
	elems := uint64(1)
	for j := range ti.Shape {
		doff := d.pos
		ne, err := d.u64(atBoth("ne[%d] of tensor %q", j, name))
		if err != nil {
			return TensorInfo{}, err
		}
		if ne == 0 || ne > math.MaxInt64 {
			return TensorInfo{}, d.errAt(doff, "tensor %q has invalid ne[%d] = %d (must be in 1..2^63-1)", name, j, ne)
		}
		hi, lo := bits.Mul64(elems, ne)
		if hi != 0 || lo > math.MaxInt64 {
			return TensorInfo{}, d.errAt(doff, "tensor %q: element count of shape %v overflows int64", name, ti.Shape[:j])
		}
		elems = lo
		ti.Shape[j] = int64(ne)
	}
	toff := d.pos
	t32, err := d.u32(atName("type of tensor %q", name))
	if err != nil {
		return TensorInfo{}, err
	}
	ti.Type = Type(t32)
	switch {
	case ti.Type.Removed():
		return TensorInfo{}, d.errAt(toff, "tensor %q has removed ggml type %d (%s)", name, t32, ti.Type)
	case !ti.Type.Valid():
		return TensorInfo{}, d.errAt(toff, "tensor %q has unknown ggml type %d", name, t32)
	}
	if bs := int64(ti.Type.BlockSize()); ti.RowLen()%bs != 0 {
		return TensorInfo{}, d.errAt(toff, "tensor %q of type %s has ne[0] = %d, not a multiple of the block size %d", name, ti.Type, ti.RowLen(), bs)
	}
	rb, rerr := ti.Type.RowBytes(ti.RowLen())
	hi, lo := bits.Mul64(uint64(rb), uint64(ti.Rows()))
	if rerr != nil || hi != 0 || lo > math.MaxInt64/2 {
		return TensorInfo{}, d.errAt(toff, "tensor %q: byte size of %v %s overflows", name, ti.Shape, ti.Type)
	}
	ti.Size = int64(lo)
	if ti.Offset, err = d.u64(atName("offset of tensor %q", name)); err != nil {
		return TensorInfo{}, err
	}
	return ti, nil
}

// checkLayout verifies that tensor offsets are the running sum of padded sizes in info order
// and, when checkData, that each tensor's data lies inside the file.
func (f *File) checkLayout(checkData bool) error {
	var want uint64
	for i, t := range f.Tensors {
		if t.Offset != want {
			what := "a gap"
			if t.Offset < want {
				what = "an overlap or reordering"
			}
			return fmt.Errorf("%w: %s: tensor %q (info %d) has offset %d, expected %d (offsets must be the running sum of padded tensor sizes in info order; this is %s)",
				ErrFormat, f.Path, t.Name, i, t.Offset, want, what)
		}
		padded := uint64(alignUp(t.Size, f.Alignment))
		if padded > math.MaxInt64-want || int64(want+padded) > math.MaxInt64-f.DataOffset {
			return fmt.Errorf("%w: %s: tensor %q: data section size overflows", ErrFormat, f.Path, t.Name)
		}
		want += padded
		if checkData {
			if end := f.DataOffset + int64(t.Offset) + t.Size; end > f.Size {
				return fmt.Errorf("%w: %s: tensor %q data [%d, %d) is past the end of the file (%d bytes): truncated or incomplete",
					ErrFormat, f.Path, t.Name, f.DataOffset+int64(t.Offset), end, f.Size)
			}
		}
	}
	return nil
}

// alignUp rounds n up to a multiple of a (a power of two).
func alignUp(n, a int64) int64 { return (n + a - 1) &^ (a - 1) }
