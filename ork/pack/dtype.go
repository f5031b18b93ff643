package pack

import (
	"encoding/hex"
	"fmt"
	"strings"

	"orkpipe/ork/tile"
)

// Version is the format version this package writes (docs/orkpack.md 1.3 lists every version and what it
// added).
const Version uint32 = 3

// Supported reports whether this package can read a pack of the given format version: every version from
// 1 to Version (an older version reads with the defaults docs/orkpack.md 1.3 gives for the fields it lacks).
// It is the only place that decides readability: every reader calls it, nothing else compares version
// numbers.
func Supported(version uint32) bool { return version >= 1 && version <= Version }

// PageSize is the page entries are aligned and padded to (version 1).
const PageSize = 4096

// DType is an entry's data type (docs/orkpack.md 2.1).
type DType uint8

// Data types.
const (
	I4Native DType = 1 // int4, native tiles, resident int4
	I4       DType = 2 // int4, compact row-major container, inflated to int8 at load
	I8       DType = 3 // int8, native tiles
	I8Rot    DType = 4 // int8, native tiles, Hadamard-rotated
	I4RotA8  DType = 5 // int4, native tiles, Hadamard-rotated, inflated to int8 at load, int8 activations
	F16      DType = 6 // fp16, native tiles, no scales
)

// DTypes lists every data type in code order.
var DTypes = []DType{I4Native, I4, I8, I8Rot, I4RotA8, F16}

var dtypeNames = map[DType]string{
	I4Native: "I4_NATIVE", I4: "I4", I8: "I8", I8Rot: "I8_ROT", I4RotA8: "I4_ROT_A8", F16: "F16",
}

func (d DType) String() string {
	if s, ok := dtypeNames[d]; ok {
		return s
	}
	return fmt.Sprintf("DTYPE(%d)", uint8(d))
}

// Valid reports whether d is a known data type.
func (d DType) Valid() bool { _, ok := dtypeNames[d]; return ok }

// ParseDType parses a name such as "I4_ROT_A8".
func ParseDType(s string) (DType, error) {
	for d, n := range dtypeNames {
		if strings.EqualFold(n, s) {
			return d, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown dtype %q (want one of I4_NATIVE, I4, I8, I8_ROT, I4_ROT_A8, F16)", ErrInput, s)
}

// MarshalText encodes the dtype by name.
func (d DType) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Kind returns the on-disk codes layout of the dtype.
func (d DType) Kind() tile.Kind {
	switch d {
	case I4Native, I4RotA8:
		return tile.I4Native
	case I4:
		return tile.I4Compact
	case I8, I8Rot:
		return tile.I8Native
	case F16:
		return tile.F16Native
	}
	return 0
}

// Bits returns the width of one stored value: 4 or 8 for the integer dtypes, 16 for F16 (0 for an unknown dtype).
func (d DType) Bits() int {
	switch {
	case d.Int4():
		return 4
	case d == F16:
		return 16
	case d.Valid():
		return 8
	}
	return 0
}

// Int4 reports whether the dtype stores int4 codes.
func (d DType) Int4() bool { return d == I4Native || d == I4 || d == I4RotA8 }

// HasScales reports whether entries of this dtype carry scales.
func (d DType) HasScales() bool { return d != F16 }

// RotationRequired reports whether the dtype is only valid with a rotation.
func (d DType) RotationRequired() bool { return d == I8Rot || d == I4RotA8 }

// DefaultActBits is the activation width a weight of this dtype expects unless told otherwise.
func (d DType) DefaultActBits() int {
	switch d {
	case I4Native:
		return 4
	case F16:
		return 16
	}
	return 8
}

func (d DType) actBitsOK(b int) bool {
	switch d {
	case I4Native:
		return b == 4 || b == 8
	case F16:
		return b == 16
	}
	return b == 8
}

// RotationKind says how a weight was rotated before quantization.
type RotationKind uint8

// Rotation kinds.
const (
	RotNone             RotationKind = 0
	RotHadamard         RotationKind = 1 // block Hadamard with random ±1 signs drawn from Seed
	RotHadamardUnsigned RotationKind = 2 // block Hadamard without signs (Seed 0)
)

// Rotation describes the rotation a weight (and so its activations) carries.
type Rotation struct {
	Kind  RotationKind `json:"kind"`
	Block int          `json:"block,omitempty"` // a power of two from minRotationBlock to 2^24 dividing the entry's K
	Seed  uint64       `json:"seed,omitempty"`  // sign seed
}

// minRotationBlock is the smallest Hadamard block of a rotated entry (docs/orkpack.md 3): the smallest the
// quantizer rotates with (quant.MinBlock) and the emulation computes.
const minRotationBlock = 32

func (r Rotation) String() string {
	switch r.Kind {
	case RotNone:
		return "none"
	case RotHadamardUnsigned:
		return fmt.Sprintf("hadamard(block=%d,unsigned)", r.Block)
	}
	return fmt.Sprintf("hadamard(block=%d,seed=%d)", r.Block, r.Seed)
}

func (r Rotation) validate() error {
	switch r.Kind {
	case RotNone:
		if r.Block != 0 || r.Seed != 0 {
			return fmt.Errorf("rotation none with block %d seed %d: want both 0", r.Block, r.Seed)
		}
	case RotHadamard, RotHadamardUnsigned:
		if r.Block < minRotationBlock || r.Block > tile.MaxDim || r.Block&(r.Block-1) != 0 {
			return fmt.Errorf("hadamard block %d: want a power of two from %d to %d", r.Block, minRotationBlock, tile.MaxDim)
		}
		if r.Kind == RotHadamardUnsigned && r.Seed != 0 {
			return fmt.Errorf("unsigned hadamard with seed %d: want 0", r.Seed)
		}
	default:
		return fmt.Errorf("rotation kind %d: want 0 (none), 1 (signed hadamard) or 2 (unsigned hadamard)", r.Kind)
	}
	return nil
}

// ScaleLayout is how an entry stores its scales.
type ScaleLayout uint8

// Scale layouts.
const (
	ScalesNone     ScaleLayout = 0
	ScalesF32RowNG ScaleLayout = 1 // float32 LE, row-major [N][groups]
)

// Digest is a BLAKE3-256 sum.
type Digest [32]byte

// String returns "blake3:<hex>".
func (d Digest) String() string { return "blake3:" + hex.EncodeToString(d[:]) }

// IsZero reports whether d is all zero.
func (d Digest) IsZero() bool { return d == Digest{} }

// MarshalText encodes the digest as "blake3:<hex>".
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }
