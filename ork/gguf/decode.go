package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"
)

// loc names the field being read. It is formatted only when an error needs it, so that the
// hot path of parsing allocates nothing for messages.
type loc struct {
	format string // up to one %d (idx) followed by up to one %q (name)
	idx    int
	name   string
	elem   int // array element index + 1; 0 for none
	suffix string
}

func at(format string) loc                      { return loc{format: format} }
func atIdx(format string, i int) loc            { return loc{format: format, idx: i} }
func atName(format, name string) loc            { return loc{format: format, name: name} }
func atBoth(format string, i int, n string) loc { return loc{format: format, idx: i, name: n} }

func (l loc) with(suffix string) loc { l.suffix += suffix; return l }
func (l loc) at(i int) loc           { l.elem = i + 1; return l }

func (l loc) String() string {
	var s string
	d, q := strings.Contains(l.format, "%d"), strings.Contains(l.format, "%q")
	switch {
	case d && q:
		s = fmt.Sprintf(l.format, l.idx, l.name)
	case d:
		s = fmt.Sprintf(l.format, l.idx)
	case q:
		s = fmt.Sprintf(l.format, l.name)
	default:
		s = l.format
	}
	if l.elem > 0 {
		s += fmt.Sprintf("[%d]", l.elem-1)
	}
	return s + l.suffix
}

// decoder reads the header sequentially from an io.ReaderAt, tracking the absolute offset so
// that every error can say where it happened, and the bytes left so that no count read from the
// file is trusted before it is checked against them.
type decoder struct {
	name    string // file name for messages
	br      *bufio.Reader
	pos     int64
	size    int64
	scratch []byte
}

func newDecoder(name string, r io.ReaderAt, size int64) *decoder {
	bufSize := 64 << 10
	if size < int64(bufSize) {
		bufSize = max(int(size), 16)
	}
	return &decoder{name: name, br: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), bufSize), size: size}
}

// errAt formats an ErrFormat error at absolute offset off.
func (d *decoder) errAt(off int64, format string, a ...any) error {
	return fmt.Errorf("%w: %s: offset %d: %s", ErrFormat, d.name, off, fmt.Sprintf(format, a...))
}

func (d *decoder) left() int64 { return d.size - d.pos }

// read fills p from the file, failing with a message naming what was being read.
func (d *decoder) read(p []byte, what loc) error {
	if int64(len(p)) > d.left() {
		return d.errAt(d.pos, "truncated: %s needs %d bytes, only %d left in the file", what, len(p), d.left())
	}
	if _, err := io.ReadFull(d.br, p); err != nil {
		return fmt.Errorf("%s: offset %d: reading %s: %w", d.name, d.pos, what, err)
	}
	d.pos += int64(len(p))
	return nil
}

func (d *decoder) buf(n int) []byte {
	if cap(d.scratch) < n {
		d.scratch = make([]byte, n)
	}
	return d.scratch[:n]
}

func (d *decoder) u32(what loc) (uint32, error) {
	b := d.buf(4)
	if err := d.read(b, what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64(what loc) (uint64, error) {
	b := d.buf(8)
	if err := d.read(b, what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// count reads a u64 count of items each at least minSize bytes and checks it against the
// bytes left before anyone allocates from it.
func (d *decoder) count(what loc, minSize int) (int, error) {
	off := d.pos
	n, err := d.u64(what)
	if err != nil {
		return 0, err
	}
	if minSize > 0 && n > uint64(d.left())/uint64(minSize) {
		return 0, d.errAt(off, "%s %d is larger than the %d bytes left in the file allow (at least %d bytes each)", what, n, d.left(), minSize)
	}
	if n > math.MaxInt32*64 { // only reachable with minSize 0
		return 0, d.errAt(off, "%s %d is implausibly large", what, n)
	}
	return int(n), nil
}

// str reads a GGUF string (u64 length + bytes).
func (d *decoder) str(what loc) (string, error) {
	off := d.pos
	n, err := d.u64(what.with(" length"))
	if err != nil {
		return "", err
	}
	if n > uint64(d.left()) {
		return "", d.errAt(off, "%s length %d is longer than the %d bytes left in the file", what, n, d.left())
	}
	b := d.buf(int(n))
	if err := d.read(b, what); err != nil {
		return "", err
	}
	return string(b), nil
}

// scalar reads one scalar of type t into Value's raw bits.
func (d *decoder) scalar(t ValueType, what loc) (Value, error) {
	if t == ValueString {
		s, err := d.str(what)
		return String(s), err
	}
	b := d.buf(t.size())
	if err := d.read(b, what); err != nil {
		return Value{}, err
	}
	v := Value{typ: t}
	switch t {
	case ValueUint8, ValueBool:
		v.bits = uint64(b[0])
	case ValueInt8:
		v.bits = uint64(int64(int8(b[0])))
	case ValueUint16:
		v.bits = uint64(binary.LittleEndian.Uint16(b))
	case ValueInt16:
		v.bits = uint64(int64(int16(binary.LittleEndian.Uint16(b))))
	case ValueUint32, ValueFloat32:
		v.bits = uint64(binary.LittleEndian.Uint32(b))
	case ValueInt32:
		v.bits = uint64(int64(int32(binary.LittleEndian.Uint32(b))))
	case ValueUint64, ValueInt64, ValueFloat64:
		v.bits = binary.LittleEndian.Uint64(b)
	}
	return v, nil
}

// array reads an array value body: element type, count, elements.
func (d *decoder) array(what loc) (Value, error) {
	off := d.pos
	et32, err := d.u32(what.with(" element type"))
	if err != nil {
		return Value{}, err
	}
	et := ValueType(et32)
	switch {
	case et == ValueArray:
		return Value{}, d.errAt(off, "%s: nested arrays are not allowed (element type array)", what)
	case !et.Valid():
		return Value{}, d.errAt(off, "%s: unknown array element type %d (valid: 0..12)", what, et32)
	}
	n, err := d.count(what.with(" element count"), et.minSize())
	if err != nil {
		return Value{}, err
	}
	v := Value{typ: ValueArray, elem: et}
	if et == ValueString {
		a := make([]string, n)
		for i := range a {
			if a[i], err = d.str(what.at(i)); err != nil {
				return Value{}, err
			}
		}
		v.arr = a
		return v, nil
	}
	es := et.size()
	switch et {
	case ValueUint8, ValueBool:
		a := make([]uint8, n)
		err = d.read(a, what)
		v.arr = a
	case ValueInt8:
		a := make([]int8, n)
		err = d.chunks(n, es, what, func(i int, b []byte) { a[i] = int8(b[0]) })
		v.arr = a
	case ValueUint16:
		a := make([]uint16, n)
		err = d.chunks(n, es, what, func(i int, b []byte) { a[i] = binary.LittleEndian.Uint16(b) })
		v.arr = a
	case ValueInt16:
		a := make([]int16, n)
		err = d.chunks(n, es, what, func(i int, b []byte) { a[i] = int16(binary.LittleEndian.Uint16(b)) })
		v.arr = a
	case ValueUint32:
		a := make([]uint32, n)
		err = d.chunks(n, es, what, func(i int, b []byte) { a[i] = binary.LittleEndian.Uint32(b) })
		v.arr = a
	case ValueInt32:
		a := make([]int32, n)
		err = d.chunks(n, es, what, func(i int, b []byte) { a[i] = int32(binary.LittleEndian.Uint32(b)) })
		v.arr = a
	case ValueFloat32:
		a := make([]float32, n)
		err = d.chunks(n, es, what, func(i int, b []byte) { a[i] = math.Float32frombits(binary.LittleEndian.Uint32(b)) })
		v.arr = a
	case ValueUint64:
		a := make([]uint64, n)
		err = d.chunks(n, es, what, func(i int, b []byte) { a[i] = binary.LittleEndian.Uint64(b) })
		v.arr = a
	case ValueInt64:
		a := make([]int64, n)
		err = d.chunks(n, es, what, func(i int, b []byte) { a[i] = int64(binary.LittleEndian.Uint64(b)) })
		v.arr = a
	case ValueFloat64:
		a := make([]float64, n)
		err = d.chunks(n, es, what, func(i int, b []byte) { a[i] = math.Float64frombits(binary.LittleEndian.Uint64(b)) })
		v.arr = a
	}
	if err != nil {
		return Value{}, err
	}
	return v, nil
}

// chunks reads n elements of es bytes each in bounded chunks and hands each to put.
func (d *decoder) chunks(n, es int, what loc, put func(i int, b []byte)) error {
	const chunk = 4096
	for i := 0; i < n; i += chunk {
		m := min(chunk, n-i)
		b := d.buf(m * es)
		if err := d.read(b, what); err != nil {
			return err
		}
		for j := 0; j < m; j++ {
			put(i+j, b[j*es:(j+1)*es])
		}
	}
	return nil
}
