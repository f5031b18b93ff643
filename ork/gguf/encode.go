package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// encoder appends the little-endian GGUF encoding of header items to a byte slice.
type encoder struct{ b []byte }

func (e *encoder) u32(x uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, x) }
func (e *encoder) u64(x uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, x) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.b = append(e.b, s...) }

func (e *encoder) scalar(t ValueType, bits uint64) {
	switch t.size() {
	case 1:
		e.b = append(e.b, byte(bits))
	case 2:
		e.b = binary.LittleEndian.AppendUint16(e.b, uint16(bits))
	case 4:
		e.u32(uint32(bits))
	case 8:
		e.u64(bits)
	}
}

func (e *encoder) value(key string, v Value) error {
	if !v.typ.Valid() {
		return fmt.Errorf("%w: key %q: invalid value (type %d)", ErrWrite, key, uint32(v.typ))
	}
	e.u32(uint32(v.typ))
	switch v.typ {
	case ValueString:
		e.str(v.str)
		return nil
	case ValueArray:
	default:
		e.scalar(v.typ, v.bits)
		return nil
	}
	if v.elem == ValueArray || !v.elem.Valid() {
		return fmt.Errorf("%w: key %q: invalid array element type %s", ErrWrite, key, v.elem)
	}
	e.u32(uint32(v.elem))
	e.u64(uint64(v.Len()))
	switch a := v.arr.(type) {
	case []uint8:
		e.b = append(e.b, a...)
	case []int8:
		for _, x := range a {
			e.b = append(e.b, byte(x))
		}
	case []uint16:
		for _, x := range a {
			e.b = binary.LittleEndian.AppendUint16(e.b, x)
		}
	case []int16:
		for _, x := range a {
			e.b = binary.LittleEndian.AppendUint16(e.b, uint16(x))
		}
	case []uint32:
		for _, x := range a {
			e.u32(x)
		}
	case []int32:
		for _, x := range a {
			e.u32(uint32(x))
		}
	case []float32:
		for _, x := range a {
			e.u32(math.Float32bits(x))
		}
	case []uint64:
		for _, x := range a {
			e.u64(x)
		}
	case []int64:
		for _, x := range a {
			e.u64(uint64(x))
		}
	case []float64:
		for _, x := range a {
			e.u64(math.Float64bits(x))
		}
	case []string:
		for _, x := range a {
			e.str(x)
		}
	case nil:
	default:
		return fmt.Errorf("%w: key %q: unsupported array storage %T", ErrWrite, key, v.arr)
	}
	return nil
}

// zeros writes n zero bytes.
func zeros(w io.Writer, n int64) error {
	var z [512]byte
	for n > 0 {
		m := min(n, int64(len(z)))
		if _, err := w.Write(z[:m]); err != nil {
			return err
		}
		n -= m
	}
	return nil
}
