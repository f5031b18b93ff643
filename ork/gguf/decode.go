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

// MaxMetadataBytes caps the KV (metadata) section of a GGUF: the bytes from the end of the
// 24-byte preamble to the first tensor info, keys, types and values together. Parse refuses a
// file whose KV section would pass it with ErrLimit, naming the file, the key and the limit,
// before allocating for the value that would pass it.
//
// No real GGUF comes near it. The largest KV sections are tokenizers: measured, GPT-2's vocab
// file (50k tokens and 50k merges) has 1.8 MB, llama's SPM vocab (32k tokens with scores and
// types) 0.7 MB; a 248k-token vocab with merges (Qwen3.5/3.6) is about 11 MB (tokens ~4 MB,
// merges ~5.5 MB, token types 1 MB), a 262k-token SentencePiece vocab (Gemma: tokens, scores,
// types) about 7 MB, chat templates a few KB. 256 MiB is over 20 times the largest of them.
//
// It bounds what parsing holds in memory however large a (sparse) file declares its values:
// decoded, a KV section takes at most about twice its file bytes (a string in a string array
// costs 16 bytes of header for its 8-byte length), so at most ~512 MiB at the cap. Without it, a
// file made sparse with truncate satisfies any "bytes left in the file" check, and a u8 array
// declaring 12 Gi elements was read into 12 GiB.
const MaxMetadataBytes = 256 << 20

// MaxTensors caps the tensor count of a GGUF and MaxTensorInfoBytes its tensor-info table: the bytes
// from the end of the KV section to the end of the last tensor info (names, dims, types, offsets).
// Parse refuses a file past either with ErrLimit, naming the file, the field and the limit: a count
// past MaxTensors as it is read, before any tensor info is, and the table as it is read, before
// allocating for the field that would pass MaxTensorInfoBytes.
//
// No real GGUF comes near them. The largest models have one to two thousand tensors: Llama 3.1
// 405B 126 blocks of 9 and 4 more (1,138), DeepSeek-V3 61 blocks of 12 to 20 (about 1,100); experts
// are one tensor per block and kind, and even a 128-expert, 94-block model written the old way, an
// expert a tensor, has 36,096 of them. A tensor info takes 24 bytes, 8 more a dimension and its
// name (under 64 bytes), at most 119 in all: the tables of those models take about 100 KB.
//
// They bound what parsing allocates for the tensor infos however many a (sparse) file declares:
// each TensorInfo (64 bytes), its shape, its name and its index entry, with the slice and index
// doubling as they grow. Measured, 262,144 infos of 5-byte names and no dims (7.5 MB of table)
// allocate 62 MB, 140,985 infos of 63-byte names and 4 dims (16 MiB) 52 MB: about 64 MiB at either
// cap. Without them a table of real bytes was decoded whole, whatever its size: those two tables
// (9.5 MB and 16 MiB, one tensor past each cap) allocated 118 MB and 81 MB (TestTensorInfoLimits).
const (
	MaxTensors         = 1 << 18
	MaxTensorInfoBytes = 16 << 20
)

// sectionLimit is a cap on the bytes of one section of the header (the KV section, the tensor-info
// table): start is the section's offset, max its cap, and name and constant say what it is and
// which constant sets it, for messages.
type sectionLimit struct {
	start    int64
	max      int64
	name     string
	constant string
}

var (
	kvLimit         = sectionLimit{max: MaxMetadataBytes, name: "KV (metadata) section", constant: "gguf.MaxMetadataBytes"}
	tensorInfoLimit = sectionLimit{max: MaxTensorInfoBytes, name: "tensor-info table", constant: "gguf.MaxTensorInfoBytes"}
)

// decoder reads the header sequentially from an io.ReaderAt, tracking the absolute offset so
// that every error can say where it happened, and the bytes left so that no count read from the
// file is trusted before it is checked against them. Nothing is allocated by a count read from
// the file: strings and arrays grow as their bytes are read (readChunk at a time).
type decoder struct {
	name    string // file name for messages
	br      *bufio.Reader
	pos     int64
	size    int64
	limit   *sectionLimit // the limit on the section being read, nil outside the limited sections
	scratch []byte
}

const (
	// readChunk is the most read at a time into a string or an array's elements.
	readChunk = 64 << 10
	// firstGrow is the most memory an array is given before its elements have been read (one
	// allocation for every real vocab, 512 Ki strings); past it the array doubles as it is read.
	firstGrow = 8 << 20
)

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

// enter starts a limited section at the current offset (l a copy of kvLimit or tensorInfoLimit);
// leave ends it.
func (d *decoder) enter(l sectionLimit) { l.start = d.pos; d.limit = &l }
func (d *decoder) leave()               { d.limit = nil }

// limitLeft is what is left of the current section's limit (MaxInt64 outside the limited sections).
func (d *decoder) limitLeft() int64 {
	if d.limit == nil {
		return math.MaxInt64
	}
	return d.limit.start + d.limit.max - d.pos
}

// limitErr is the ErrLimit error for what (at off) needing need more bytes of the current section.
func (d *decoder) limitErr(off int64, what loc, need uint64) error {
	l := d.limit
	return fmt.Errorf("%w: %s: offset %d: %s needs %d bytes, past the %d-byte limit on the %s (%s; %d bytes of it before this)",
		ErrLimit, d.name, off, what, need, l.max, l.name, l.constant, off-l.start)
}

// read fills p from the file, failing with a message naming what was being read.
func (d *decoder) read(p []byte, what loc) error {
	if int64(len(p)) > d.left() {
		return d.errAt(d.pos, "truncated: %s needs %d bytes, only %d left in the file", what, len(p), d.left())
	}
	if int64(len(p)) > d.limitLeft() {
		return d.limitErr(d.pos, what, uint64(len(p)))
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
// bytes left in the file and, in a limited section, in its limit. Callers still allocate
// only as the items are read.
func (d *decoder) count(what loc, minSize int) (int, error) {
	off := d.pos
	n, err := d.u64(what)
	if err != nil {
		return 0, err
	}
	if minSize > 0 && n > uint64(d.left())/uint64(minSize) {
		return 0, d.errAt(off, "%s %d is larger than the %d bytes left in the file allow (at least %d bytes each)", what, n, d.left(), minSize)
	}
	if minSize > 0 && n > uint64(d.limitLeft())/uint64(minSize) {
		return 0, d.limitErr(off, what.with(fmt.Sprintf(" %d (at least %d bytes each)", n, minSize)), n*uint64(minSize))
	}
	if n > math.MaxInt32*64 { // only reachable with minSize 0
		return 0, d.errAt(off, "%s %d is implausibly large", what, n)
	}
	return int(n), nil
}

// str reads a GGUF string (u64 length + bytes).
func (d *decoder) str(what loc) (string, error) {
	n, err := d.strLen(what)
	if err != nil {
		return "", err
	}
	return d.strBody(n, what)
}

// strLen reads a string's u64 length and checks it against the bytes left in the file and, in a
// limited section, in its limit.
func (d *decoder) strLen(what loc) (int, error) {
	return d.strLenUpTo(what, math.MaxInt64, nil)
}

// strLenUpTo is strLen with a longest length: a length past the file's end is refused first,
// then one above longest with tooLong(its offset, the length), then one past the section's limit.
func (d *decoder) strLenUpTo(what loc, longest uint64, tooLong func(off int64, n uint64) error) (int, error) {
	off := d.pos
	n, err := d.u64(what.with(" length"))
	if err != nil {
		return 0, err
	}
	if n > uint64(d.left()) {
		return 0, d.errAt(off, "%s length %d is longer than the %d bytes left in the file", what, n, d.left())
	}
	if n > longest {
		return 0, tooLong(off, n)
	}
	if n > uint64(d.limitLeft()) {
		return 0, d.limitErr(off, what, n)
	}
	return int(n), nil
}

// strBody reads the n bytes of a string whose length strLen checked, growing the string
// readChunk at a time as they are read.
func (d *decoder) strBody(n int, what loc) (string, error) {
	if n <= readChunk {
		b := d.buf(n)
		if err := d.read(b, what); err != nil {
			return "", err
		}
		return string(b), nil
	}
	var sb strings.Builder
	for left := n; left > 0; {
		b := d.buf(min(left, readChunk))
		if err := d.read(b, what); err != nil {
			return "", err
		}
		sb.Write(b)
		left -= len(b)
	}
	return sb.String(), nil
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
		var a []string
		for i := 0; i < n; i++ {
			s, err := d.str(what.at(i))
			if err != nil {
				return Value{}, err
			}
			a = append(grow(a, n, firstGrow/16), s)
		}
		if a == nil {
			a = []string{}
		}
		v.arr = a
		return v, nil
	}
	switch et {
	case ValueUint8, ValueBool:
		v.arr, err = elems(d, n, 1, what, func(b []byte) uint8 { return b[0] })
	case ValueInt8:
		v.arr, err = elems(d, n, 1, what, func(b []byte) int8 { return int8(b[0]) })
	case ValueUint16:
		v.arr, err = elems(d, n, 2, what, binary.LittleEndian.Uint16)
	case ValueInt16:
		v.arr, err = elems(d, n, 2, what, func(b []byte) int16 { return int16(binary.LittleEndian.Uint16(b)) })
	case ValueUint32:
		v.arr, err = elems(d, n, 4, what, binary.LittleEndian.Uint32)
	case ValueInt32:
		v.arr, err = elems(d, n, 4, what, func(b []byte) int32 { return int32(binary.LittleEndian.Uint32(b)) })
	case ValueFloat32:
		v.arr, err = elems(d, n, 4, what, func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) })
	case ValueUint64:
		v.arr, err = elems(d, n, 8, what, binary.LittleEndian.Uint64)
	case ValueInt64:
		v.arr, err = elems(d, n, 8, what, func(b []byte) int64 { return int64(binary.LittleEndian.Uint64(b)) })
	case ValueFloat64:
		v.arr, err = elems(d, n, 8, what, func(b []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b)) })
	}
	if err != nil {
		return Value{}, err
	}
	return v, nil
}

// elems reads n elements of es bytes each, readChunk bytes at a time, converting each with
// conv. The slice grows as elements are read, never by n alone: n has been checked against the
// bytes left, but those may be a file's hole.
func elems[T any](d *decoder, n, es int, what loc, conv func([]byte) T) ([]T, error) {
	per := readChunk / es
	a := []T{}
	for len(a) < n {
		m := min(per, n-len(a))
		b := d.buf(m * es)
		if err := d.read(b, what); err != nil {
			return nil, err
		}
		a = grow(a, n, firstGrow/es) // room for all m: the capacity is n or at least len(a)+per
		for j := 0; j < m; j++ {
			a = append(a, conv(b[j*es:(j+1)*es]))
		}
	}
	return a, nil
}

// grow returns a with room for one more element (of at most n): first elements at first,
// then twice the capacity, never more than n. Memory then follows the elements read, at most
// twice them (or first), whatever n declares.
func grow[T any](a []T, n, first int) []T {
	if len(a) < cap(a) {
		return a
	}
	b := make([]T, len(a), min(n, max(first, 2*cap(a))))
	copy(b, a)
	return b
}
