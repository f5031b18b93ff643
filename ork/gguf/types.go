package gguf

import (
	"fmt"
	"math"
	"math/bits"
)

// Type is a ggml tensor type id as stored in a GGUF tensor info.
type Type uint32

// The ggml types (ids from ggml.h). Ids 4, 5 (Q4_2, Q4_3), 31-33 (Q4_0_4_4, Q4_0_4_8,
// Q4_0_8_8) and 36-38 (IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8) were removed from ggml and are
// rejected like llama.cpp rejects them.
const (
	TypeF32     Type = 0
	TypeF16     Type = 1
	TypeQ4_0    Type = 2
	TypeQ4_1    Type = 3
	TypeQ5_0    Type = 6
	TypeQ5_1    Type = 7
	TypeQ8_0    Type = 8
	TypeQ8_1    Type = 9
	TypeQ2_K    Type = 10
	TypeQ3_K    Type = 11
	TypeQ4_K    Type = 12
	TypeQ5_K    Type = 13
	TypeQ6_K    Type = 14
	TypeQ8_K    Type = 15
	TypeIQ2_XXS Type = 16
	TypeIQ2_XS  Type = 17
	TypeIQ3_XXS Type = 18
	TypeIQ1_S   Type = 19
	TypeIQ4_NL  Type = 20
	TypeIQ3_S   Type = 21
	TypeIQ2_S   Type = 22
	TypeIQ4_XS  Type = 23
	TypeI8      Type = 24
	TypeI16     Type = 25
	TypeI32     Type = 26
	TypeI64     Type = 27
	TypeF64     Type = 28
	TypeIQ1_M   Type = 29
	TypeBF16    Type = 30
	TypeTQ1_0   Type = 34
	TypeTQ2_0   Type = 35
	TypeMXFP4   Type = 39

	// TypeCount is one past the highest id this package knows.
	TypeCount Type = 40
)

// QK_K is the super-block size of the K-quants and IQ types.
const qkK = 256

// typeTraits holds a type's name, elements per block and bytes per block (from ggml-common.h
// and gguf-py's GGML_QUANT_SIZES). A zero blockSize marks a removed id.
type typeTraits struct {
	name       string
	blockSize  int
	blockBytes int
}

var typeTable = [TypeCount]typeTraits{
	TypeF32:     {"F32", 1, 4},
	TypeF16:     {"F16", 1, 2},
	TypeQ4_0:    {"Q4_0", 32, 2 + 16},
	TypeQ4_1:    {"Q4_1", 32, 2 + 2 + 16},
	4:           {"Q4_2 (removed)", 0, 0},
	5:           {"Q4_3 (removed)", 0, 0},
	TypeQ5_0:    {"Q5_0", 32, 2 + 4 + 16},
	TypeQ5_1:    {"Q5_1", 32, 2 + 2 + 4 + 16},
	TypeQ8_0:    {"Q8_0", 32, 2 + 32},
	TypeQ8_1:    {"Q8_1", 32, 2 + 2 + 32},
	TypeQ2_K:    {"Q2_K", qkK, qkK/16 + qkK/4 + 2 + 2},
	TypeQ3_K:    {"Q3_K", qkK, qkK/8 + qkK/4 + 12 + 2},
	TypeQ4_K:    {"Q4_K", qkK, 2 + 2 + 12 + qkK/2},
	TypeQ5_K:    {"Q5_K", qkK, 2 + 2 + 12 + qkK/8 + qkK/2},
	TypeQ6_K:    {"Q6_K", qkK, qkK/2 + qkK/4 + qkK/16 + 2},
	TypeQ8_K:    {"Q8_K", qkK, 4 + qkK + qkK/16*2},
	TypeIQ2_XXS: {"IQ2_XXS", qkK, 2 + qkK/4},
	TypeIQ2_XS:  {"IQ2_XS", qkK, 2 + qkK/4 + qkK/32},
	TypeIQ3_XXS: {"IQ3_XXS", qkK, 2 + qkK/4 + qkK/8},
	TypeIQ1_S:   {"IQ1_S", qkK, 2 + qkK/8 + qkK/16},
	TypeIQ4_NL:  {"IQ4_NL", 32, 2 + 16},
	TypeIQ3_S:   {"IQ3_S", qkK, 2 + qkK/4 + qkK/8 + qkK/32 + 4},
	TypeIQ2_S:   {"IQ2_S", qkK, 2 + qkK/4 + qkK/16},
	TypeIQ4_XS:  {"IQ4_XS", qkK, 2 + 2 + qkK/2 + qkK/64},
	TypeI8:      {"I8", 1, 1},
	TypeI16:     {"I16", 1, 2},
	TypeI32:     {"I32", 1, 4},
	TypeI64:     {"I64", 1, 8},
	TypeF64:     {"F64", 1, 8},
	TypeIQ1_M:   {"IQ1_M", qkK, qkK/8 + qkK/16 + qkK/32},
	TypeBF16:    {"BF16", 1, 2},
	31:          {"Q4_0_4_4 (removed)", 0, 0},
	32:          {"Q4_0_4_8 (removed)", 0, 0},
	33:          {"Q4_0_8_8 (removed)", 0, 0},
	TypeTQ1_0:   {"TQ1_0", qkK, 2 + 4*13},
	TypeTQ2_0:   {"TQ2_0", qkK, 2 + 64},
	36:          {"IQ4_NL_4_4 (removed)", 0, 0},
	37:          {"IQ4_NL_4_8 (removed)", 0, 0},
	38:          {"IQ4_NL_8_8 (removed)", 0, 0},
	TypeMXFP4:   {"MXFP4", 32, 1 + 16},
}

// Valid reports whether t is a ggml type llama.cpp accepts in a file (known and not removed).
func (t Type) Valid() bool { return t < TypeCount && typeTable[t].blockSize != 0 }

// Removed reports whether t is an id ggml used once and removed.
func (t Type) Removed() bool { return t < TypeCount && typeTable[t].blockSize == 0 }

// String returns the ggml name ("Q4_K"), "Q4_2 (removed)" for removed ids and "type(N)"
// for unknown ids.
func (t Type) String() string {
	if t < TypeCount {
		return typeTable[t].name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize is the number of elements per block (1 for plain types); 0 when !t.Valid().
func (t Type) BlockSize() int {
	if t < TypeCount {
		return typeTable[t].blockSize
	}
	return 0
}

// BlockBytes is the number of bytes per block; 0 when !t.Valid().
func (t Type) BlockBytes() int {
	if t < TypeCount {
		return typeTable[t].blockBytes
	}
	return 0
}

// ParseType returns the type named name ("Q8_0", "F16"; as String prints valid types).
func ParseType(name string) (Type, error) {
	for id := Type(0); id < TypeCount; id++ {
		if id.Valid() && typeTable[id].name == name {
			return id, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown ggml type name %q", ErrUnsupportedType, name)
}

// RowBytes returns the byte size of a row of n elements of type t. It fails when t is not
// valid, n is negative or not a multiple of the block size, or the size overflows int64.
func (t Type) RowBytes(n int64) (int64, error) {
	if !t.Valid() {
		return 0, fmt.Errorf("%w: invalid ggml type %s", ErrFormat, t)
	}
	bs := int64(t.BlockSize())
	if n < 0 || n%bs != 0 {
		return 0, fmt.Errorf("%w: %d elements per row of %s is not a multiple of the block size %d", ErrFormat, n, t, bs)
	}
	hi, lo := bits.Mul64(uint64(n/bs), uint64(t.BlockBytes()))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, fmt.Errorf("%w: row of %d %s elements overflows int64 bytes", ErrFormat, n, t)
	}
	return int64(lo), nil
}
