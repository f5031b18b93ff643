package gguf

import (
	"math"
	"sync"
)

// f16Table maps every IEEE half bit pattern to its float32 value (256 KiB, built once).
var (
	f16Once  sync.Once
	f16Table *[1 << 16]float32
)

func f16tab() *[1 << 16]float32 {
	f16Once.Do(func() {
		t := new([1 << 16]float32)
		for i := range t {
			t[i] = f16ToF32Slow(uint16(i))
		}
		f16Table = t
	})
	return f16Table
}

// f16ToF32s converts the len(dst) little-endian halves of src to float32 (exactly, as F16ToF32): with
// the F16C kernel where the CPU has one (finite values; a block of eight holding an Inf or a NaN goes
// by the table, so a NaN keeps its payload bit for bit), else by the table.
func f16ToF32s(dst []float32, src []byte) {
	tab := f16tab()
	for i := 0; i < len(dst); {
		if n := f16Kernel(dst[i:], src[2*i:]); n > 0 {
			i += n
			continue
		}
		for end := min(i+8, len(dst)); i < end; i++ {
			dst[i] = tab[uint16(src[2*i])|uint16(src[2*i+1])<<8]
		}
	}
}

// F16ToF32 converts an IEEE 754 binary16 bit pattern to float32 (exactly).
func F16ToF32(h uint16) float32 { return f16tab()[h] }

func f16ToF32Slow(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf / nan
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: mant * 2^-24
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// F32ToF16 converts float32 to IEEE binary16 with round-to-nearest-even, as ggml's
// GGML_FP32_TO_FP16 (F16C / the portable fallback) does. NaN stays NaN, overflow is inf.
func F32ToF16(f float32) uint16 {
	x := math.Float32bits(f)
	sign := uint16(x>>16) & 0x8000
	exp := int32(x>>23) & 0xff
	mant := x & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13) // quiet NaN, keep payload top bits
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign // underflows to zero
		}
		mant |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		rem := mant & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, up to inf: correct
	}
	return sign | uint16(r)
}

// BF16ToF32 converts a bfloat16 bit pattern to float32 (exactly).
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 converts float32 to bfloat16 with round-to-nearest-even, as ggml's
// ggml_compute_fp32_to_bf16 does (NaN is quieted, not rounded).
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + (0x7fff + (u>>16)&1)) >> 16)
}
