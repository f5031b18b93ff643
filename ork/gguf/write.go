package gguf

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/bits"
)

// Header is what Write writes before the tensor data: the version, the metadata in order and
// the tensor infos in order (Name, Type and Shape; Offset and Size are computed).
type Header struct {
	// Version is 2 or 3; 0 means 3.
	Version uint32
	KV      []KV
	Tensors []TensorInfo
}

// Header returns f's header (sharing its KV values), for writing f back or a variant of it.
func (f *File) Header() Header {
	return Header{Version: f.Version, KV: f.KV, Tensors: f.Tensors}
}

// Layout is where Write put everything.
type Layout struct {
	Alignment  int64
	DataOffset int64        // start of the data section
	Tensors    []TensorInfo // with Offset and Size filled in
	Size       int64        // total bytes written
}

// Plan validates h and returns the layout Write will produce and the encoded header bytes (up to,
// not including, the alignment padding), without writing anything. The header is verified by
// parsing it back.
func Plan(h Header) (Layout, []byte, error) {
	v := h.Version
	if v == 0 {
		v = Version
	}
	if !Supported(v) {
		return Layout{}, nil, fmt.Errorf("%w: version %d (write 2 or 3)", ErrWrite, v)
	}
	e := &encoder{}
	e.b = append(e.b, Magic...)
	e.u32(v)
	e.u64(uint64(len(h.Tensors)))
	e.u64(uint64(len(h.KV)))
	for _, kv := range h.KV {
		e.str(kv.Key)
		if err := e.value(kv.Key, kv.Value); err != nil {
			return Layout{}, nil, err
		}
	}
	l := Layout{Alignment: DefaultAlignment, Tensors: make([]TensorInfo, len(h.Tensors))}
	for _, kv := range h.KV {
		if kv.Key == AlignmentKey && kv.Value.typ == ValueUint32 {
			l.Alignment = int64(kv.Value.bits)
		}
	}
	if l.Alignment == 0 || l.Alignment&(l.Alignment-1) != 0 {
		return Layout{}, nil, fmt.Errorf("%w: %s = %d is not a power of two", ErrWrite, AlignmentKey, l.Alignment)
	}
	var off int64
	for i, t := range h.Tensors {
		t.Shape = append([]int64(nil), t.Shape...)
		size, err := tensorBytes(t)
		if err != nil {
			return Layout{}, nil, err
		}
		t.Size, t.Offset = size, uint64(off)
		off += alignUp(size, l.Alignment)
		if off < 0 {
			return Layout{}, nil, fmt.Errorf("%w: data section size overflows at tensor %q", ErrWrite, t.Name)
		}
		l.Tensors[i] = t
		e.str(t.Name)
		e.u32(uint32(len(t.Shape)))
		for _, d := range t.Shape {
			e.u64(uint64(d))
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
	}
	// Without tensors there is no data section and no padding (see File.DataOffset).
	l.DataOffset = int64(len(e.b))
	l.Size = l.DataOffset
	if len(h.Tensors) > 0 {
		l.DataOffset = alignUp(l.DataOffset, l.Alignment)
		l.Size = l.DataOffset + off
	}
	// Verify on write: the encoded header must parse back (same rules as any reader) to
	// the same layout.
	back, err := parse(context.Background(), bytes.NewReader(e.b), int64(len(e.b)), "header being written", false)
	if err != nil {
		return Layout{}, nil, fmt.Errorf("%w: %w", ErrWrite, err)
	}
	if back.DataOffset != l.DataOffset || back.Alignment != l.Alignment || len(back.Tensors) != len(l.Tensors) {
		return Layout{}, nil, fmt.Errorf("%w: header parses back with a different layout", ErrWrite)
	}
	return l, e.b, nil
}

func tensorBytes(t TensorInfo) (int64, error) {
	if len(t.Name) >= MaxNameLen { // llama.cpp accepts any shorter name, even empty
		return 0, fmt.Errorf("%w: tensor name %q is too long (%d bytes, the limit is %d)", ErrWrite, t.Name, len(t.Name), MaxNameLen-1)
	}
	if len(t.Shape) > MaxDims {
		return 0, fmt.Errorf("%w: tensor %q has %d dims, more than %d", ErrWrite, t.Name, len(t.Shape), MaxDims)
	}
	elems := uint64(1)
	for _, d := range t.Shape {
		if d < 1 {
			return 0, fmt.Errorf("%w: tensor %q has shape %v: every ne must be >= 1", ErrWrite, t.Name, t.Shape)
		}
		hi, lo := bits.Mul64(elems, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("%w: tensor %q: element count of %v overflows", ErrWrite, t.Name, t.Shape)
		}
		elems = lo
	}
	rb, err := t.Type.RowBytes(t.RowLen())
	if err != nil {
		return 0, fmt.Errorf("%w: tensor %q: %w", ErrWrite, t.Name, err)
	}
	hi, lo := bits.Mul64(uint64(rb), uint64(t.Rows()))
	if hi != 0 || lo > math.MaxInt64/2 {
		return 0, fmt.Errorf("%w: tensor %q: byte size overflows", ErrWrite, t.Name)
	}
	return int64(lo), nil
}

// TensorData writes exactly t.Size bytes of tensor i's data to w. Write checks the count.
type TensorData func(ctx context.Context, i int, t TensorInfo, w io.Writer) error

// Write writes h and then each tensor's data, supplied by data in info order, as a GGUF file
// that llama.cpp accepts: header, KV in the given order, tensor infos, zero padding to the
// alignment, tensor data at contiguous padded offsets, and padding after the last tensor (a
// file without tensors ends right after its header, as gguf-py writes it). Tensor data is
// streamed through a bounded buffer. A callback that writes more or fewer bytes than the
// tensor's size fails the write with an error naming the tensor.
func Write(ctx context.Context, w io.Writer, h Header, data TensorData) (Layout, error) {
	l, hdr, err := Plan(h)
	if err != nil {
		return Layout{}, err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := bw.Write(hdr); err != nil {
		return Layout{}, err
	}
	pos := int64(len(hdr))
	if len(l.Tensors) > 0 {
		if err := zeros(bw, l.DataOffset-pos); err != nil {
			return Layout{}, err
		}
		pos = l.DataOffset
	}
	for i, t := range l.Tensors {
		if err := ctx.Err(); err != nil {
			return Layout{}, err
		}
		cw := &exactWriter{w: bw, left: t.Size, name: t.Name}
		if err := data(ctx, i, t, cw); err != nil {
			return Layout{}, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if cw.left != 0 {
			return Layout{}, fmt.Errorf("%w: tensor %q: data callback wrote %d bytes, expected %d", ErrWrite, t.Name, t.Size-cw.left, t.Size)
		}
		if err := zeros(bw, alignUp(t.Size, l.Alignment)-t.Size); err != nil {
			return Layout{}, err
		}
		pos += alignUp(t.Size, l.Alignment)
	}
	if err := bw.Flush(); err != nil {
		return Layout{}, err
	}
	if pos != l.Size {
		return Layout{}, fmt.Errorf("%w: wrote %d bytes, planned %d", ErrWrite, pos, l.Size)
	}
	return l, nil
}

// exactWriter passes at most left bytes through and fails on more.
type exactWriter struct {
	w    io.Writer
	left int64
	name string
}

func (e *exactWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > e.left {
		return 0, fmt.Errorf("%w: tensor %q: data callback wrote more than the tensor's %d bytes", ErrWrite, e.name, e.left)
	}
	n, err := e.w.Write(p)
	e.left -= int64(n)
	return n, err
}

// CopyFrom returns a TensorData that copies each tensor's bytes from the same-named tensor of
// src (for rewriting a file with changed metadata, or a round trip). Types and shapes must match.
func CopyFrom(src *File) TensorData {
	return func(ctx context.Context, _ int, t TensorInfo, w io.Writer) error {
		st, err := src.Tensor(t.Name)
		if err != nil {
			return err
		}
		if st.Type != t.Type || st.Size != t.Size {
			return fmt.Errorf("%w: source tensor %q is %s %v, writing %s %v", ErrWrite, t.Name, st.Type, st.Shape, t.Type, t.Shape)
		}
		_, err = io.Copy(w, src.Section(st))
		return err
	}
}
