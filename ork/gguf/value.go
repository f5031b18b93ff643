package gguf

import (
	"fmt"
	"math"
)

// ValueType is the type tag of a GGUF metadata value.
type ValueType uint32

// The GGUF metadata value types.
const (
	ValueUint8     ValueType = 0
	ValueInt8      ValueType = 1
	ValueUint16    ValueType = 2
	ValueInt16     ValueType = 3
	ValueUint32    ValueType = 4
	ValueInt32     ValueType = 5
	ValueFloat32   ValueType = 6
	ValueBool      ValueType = 7
	ValueString    ValueType = 8
	ValueArray     ValueType = 9
	ValueUint64    ValueType = 10
	ValueInt64     ValueType = 11
	ValueFloat64   ValueType = 12
	valueTypeCount ValueType = 13
)

var valueTypeNames = [valueTypeCount]string{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"}

// String returns the short name ("u32", "string", "array").
func (t ValueType) String() string {
	if t < valueTypeCount {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("valuetype(%d)", uint32(t))
}

// Valid reports whether t is a known value type.
func (t ValueType) Valid() bool { return t < valueTypeCount }

// size is the encoded size of a scalar of type t (0 for string and array).
func (t ValueType) size() int {
	switch t {
	case ValueUint8, ValueInt8, ValueBool:
		return 1
	case ValueUint16, ValueInt16:
		return 2
	case ValueUint32, ValueInt32, ValueFloat32:
		return 4
	case ValueUint64, ValueInt64, ValueFloat64:
		return 8
	}
	return 0
}

// minSize is the smallest encoding of one value of type t (strings: the u64 length).
func (t ValueType) minSize() int {
	if t == ValueString {
		return 8
	}
	return t.size()
}

// Value is one metadata value: a scalar, a string or an array of one non-array type. Scalars
// keep their raw bits (bools their raw byte), so writing a parsed value back reproduces it.
// The zero Value is invalid.
type Value struct {
	typ  ValueType
	elem ValueType // element type of an array
	bits uint64    // scalar bits (ints zero/sign-extended, floats IEEE bits, bool raw byte)
	str  string
	arr  any // []uint8 (u8 and bool), []int8, []uint16, []int16, []uint32, []int32, []float32, []string, []uint64, []int64, []float64
}

// Type returns the value's type (ValueArray for arrays).
func (v Value) Type() ValueType { return v.typ }

// ElemType returns the element type of an array (meaningless otherwise).
func (v Value) ElemType() ValueType { return v.elem }

// IsArray reports whether v is an array.
func (v Value) IsArray() bool { return v.typ == ValueArray }

// Len returns the number of elements of an array, 0 otherwise.
func (v Value) Len() int {
	switch a := v.arr.(type) {
	case []uint8:
		return len(a)
	case []int8:
		return len(a)
	case []uint16:
		return len(a)
	case []int16:
		return len(a)
	case []uint32:
		return len(a)
	case []int32:
		return len(a)
	case []float32:
		return len(a)
	case []string:
		return len(a)
	case []uint64:
		return len(a)
	case []int64:
		return len(a)
	case []float64:
		return len(a)
	}
	return 0
}

// Scalar constructors.

func Uint8(x uint8) Value     { return Value{typ: ValueUint8, bits: uint64(x)} }
func Int8(x int8) Value       { return Value{typ: ValueInt8, bits: uint64(int64(x))} }
func Uint16(x uint16) Value   { return Value{typ: ValueUint16, bits: uint64(x)} }
func Int16(x int16) Value     { return Value{typ: ValueInt16, bits: uint64(int64(x))} }
func Uint32(x uint32) Value   { return Value{typ: ValueUint32, bits: uint64(x)} }
func Int32(x int32) Value     { return Value{typ: ValueInt32, bits: uint64(int64(x))} }
func Uint64(x uint64) Value   { return Value{typ: ValueUint64, bits: x} }
func Int64(x int64) Value     { return Value{typ: ValueInt64, bits: uint64(x)} }
func Float32(x float32) Value { return Value{typ: ValueFloat32, bits: uint64(math.Float32bits(x))} }
func Float64(x float64) Value { return Value{typ: ValueFloat64, bits: math.Float64bits(x)} }
func String(s string) Value   { return Value{typ: ValueString, str: s} }
func Bool(b bool) Value {
	if b {
		return Value{typ: ValueBool, bits: 1}
	}
	return Value{typ: ValueBool}
}

// Array constructors. The slice is kept, not copied.

func Uint8s(a []uint8) Value     { return Value{typ: ValueArray, elem: ValueUint8, arr: a} }
func Int8s(a []int8) Value       { return Value{typ: ValueArray, elem: ValueInt8, arr: a} }
func Uint16s(a []uint16) Value   { return Value{typ: ValueArray, elem: ValueUint16, arr: a} }
func Int16s(a []int16) Value     { return Value{typ: ValueArray, elem: ValueInt16, arr: a} }
func Uint32s(a []uint32) Value   { return Value{typ: ValueArray, elem: ValueUint32, arr: a} }
func Int32s(a []int32) Value     { return Value{typ: ValueArray, elem: ValueInt32, arr: a} }
func Float32s(a []float32) Value { return Value{typ: ValueArray, elem: ValueFloat32, arr: a} }
func Strings(a []string) Value   { return Value{typ: ValueArray, elem: ValueString, arr: a} }
func Uint64s(a []uint64) Value   { return Value{typ: ValueArray, elem: ValueUint64, arr: a} }
func Int64s(a []int64) Value     { return Value{typ: ValueArray, elem: ValueInt64, arr: a} }
func Float64s(a []float64) Value { return Value{typ: ValueArray, elem: ValueFloat64, arr: a} }
func Bools(a []bool) Value {
	raw := make([]uint8, len(a))
	for i, b := range a {
		if b {
			raw[i] = 1
		}
	}
	return Value{typ: ValueArray, elem: ValueBool, arr: raw}
}

func (v Value) typeErr(want string) error {
	if v.typ == ValueArray {
		return fmt.Errorf("%w: value is an array of %s, expected %s", ErrValueType, v.elem, want)
	}
	return fmt.Errorf("%w: value is %s, expected %s", ErrValueType, v.typ, want)
}

// Uint returns an integer value (any of u8..u64, or a non-negative i8..i64) as uint64.
func (v Value) Uint() (uint64, error) {
	switch v.typ {
	case ValueUint8, ValueUint16, ValueUint32, ValueUint64:
		return v.bits, nil
	case ValueInt8, ValueInt16, ValueInt32, ValueInt64:
		if int64(v.bits) < 0 {
			return 0, fmt.Errorf("%w: value %d is negative, expected an unsigned integer", ErrValueType, int64(v.bits))
		}
		return v.bits, nil
	}
	return 0, v.typeErr("an unsigned integer")
}

// Int returns an integer value (any of i8..i64, or u8..u64 up to MaxInt64) as int64.
func (v Value) Int() (int64, error) {
	switch v.typ {
	case ValueInt8, ValueInt16, ValueInt32, ValueInt64:
		return int64(v.bits), nil
	case ValueUint8, ValueUint16, ValueUint32, ValueUint64:
		if v.bits > math.MaxInt64 {
			return 0, fmt.Errorf("%w: value %d overflows int64", ErrValueType, v.bits)
		}
		return int64(v.bits), nil
	}
	return 0, v.typeErr("an integer")
}

// Float returns an f32 or f64 value as float64.
func (v Value) Float() (float64, error) {
	switch v.typ {
	case ValueFloat32:
		return float64(math.Float32frombits(uint32(v.bits))), nil
	case ValueFloat64:
		return math.Float64frombits(v.bits), nil
	}
	return 0, v.typeErr("a float")
}

// Bool returns a bool value (any non-zero byte is true, as in llama.cpp).
func (v Value) Bool() (bool, error) {
	if v.typ != ValueBool {
		return false, v.typeErr("bool")
	}
	return v.bits != 0, nil
}

// Str returns a string value.
func (v Value) Str() (string, error) {
	if v.typ != ValueString {
		return "", v.typeErr("string")
	}
	return v.str, nil
}

// Array returns an array's elements as their typed slice ([]string, []float32, ...; bool
// arrays as []uint8 raw bytes). The slice is shared: do not modify it.
func (v Value) Array() (any, error) {
	if v.typ != ValueArray {
		return nil, v.typeErr("an array")
	}
	return v.arr, nil
}

// StringArray returns an array of strings (shared; do not modify).
func (v Value) StringArray() ([]string, error) {
	if a, ok := v.arr.([]string); ok && v.typ == ValueArray {
		return a, nil
	}
	return nil, v.typeErr("an array of string")
}

// Float32Array returns an array of f32 (shared; do not modify).
func (v Value) Float32Array() ([]float32, error) {
	if a, ok := v.arr.([]float32); ok && v.typ == ValueArray {
		return a, nil
	}
	return nil, v.typeErr("an array of f32")
}

// Int32Array returns an array of i32 (shared; do not modify).
func (v Value) Int32Array() ([]int32, error) {
	if a, ok := v.arr.([]int32); ok && v.typ == ValueArray {
		return a, nil
	}
	return nil, v.typeErr("an array of i32")
}

// IntArray returns an array of any integer element type as []int64 (a copy). Unsigned
// elements above MaxInt64 are an error.
func (v Value) IntArray() ([]int64, error) {
	if v.typ != ValueArray {
		return nil, v.typeErr("an array of integers")
	}
	n := v.Len()
	out := make([]int64, n)
	for i := 0; i < n; i++ {
		e, ok := v.elemAt(i)
		if !ok {
			return nil, v.typeErr("an array of integers")
		}
		x, err := e.Int()
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		out[i] = x
	}
	return out, nil
}

// elemAt returns element i of an array as a scalar Value.
func (v Value) elemAt(i int) (Value, bool) {
	switch a := v.arr.(type) {
	case []uint8:
		if v.elem == ValueBool {
			return Value{typ: ValueBool, bits: uint64(a[i])}, true
		}
		return Uint8(a[i]), true
	case []int8:
		return Int8(a[i]), true
	case []uint16:
		return Uint16(a[i]), true
	case []int16:
		return Int16(a[i]), true
	case []uint32:
		return Uint32(a[i]), true
	case []int32:
		return Int32(a[i]), true
	case []uint64:
		return Uint64(a[i]), true
	case []int64:
		return Int64(a[i]), true
	case []float32:
		return Float32(a[i]), true
	case []float64:
		return Float64(a[i]), true
	case []string:
		return String(a[i]), true
	}
	return Value{}, false
}

// Interface returns the value as a plain Go value: uint64/int64/float64/bool/string for
// scalars, the typed slice for arrays.
func (v Value) Interface() any {
	switch v.typ {
	case ValueUint8, ValueUint16, ValueUint32, ValueUint64:
		return v.bits
	case ValueInt8, ValueInt16, ValueInt32, ValueInt64:
		return int64(v.bits)
	case ValueFloat32, ValueFloat64:
		f, _ := v.Float()
		return f
	case ValueBool:
		return v.bits != 0
	case ValueString:
		return v.str
	case ValueArray:
		return v.arr
	}
	return nil
}

// String formats the value for humans; arrays are abbreviated to their type, length and
// first elements.
func (v Value) String() string {
	switch v.typ {
	case ValueString:
		return fmt.Sprintf("%q", v.str)
	case ValueArray:
		n := v.Len()
		s := fmt.Sprintf("[%s; %d]", v.elem, n)
		if n > 0 {
			s += " ["
			for i := 0; i < n && i < 3; i++ {
				if i > 0 {
					s += ", "
				}
				e, _ := v.elemAt(i)
				s += e.String()
			}
			if n > 3 {
				s += ", ..."
			}
			s += "]"
		}
		return s
	case ValueFloat32:
		return fmt.Sprint(math.Float32frombits(uint32(v.bits)))
	case ValueFloat64:
		return fmt.Sprint(math.Float64frombits(v.bits))
	}
	return fmt.Sprint(v.Interface())
}

// KV is one metadata key/value pair.
type KV struct {
	Key   string
	Value Value
}
