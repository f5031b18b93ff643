package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// CanQuantize reports whether Quantize supports t.
func CanQuantize(t Type) bool {
	switch t {
	case TypeF32, TypeF16, TypeBF16, TypeQ8_0, TypeQ4_0:
		return true
	}
	return false
}

// Quantize encodes src as type t into dst, which must be exactly the encoded size of
// len(src) elements (len(src) a multiple of the block size). Q8_0 and Q4_0 follow ggml's
// quantize_row_*_ref bit for bit (what llama-quantize writes without an imatrix); F16 and BF16
// round to nearest even as ggml does.
func Quantize(t Type, src []float32, dst []byte) error {
	if !CanQuantize(t) {
		return fmt.Errorf("%w: cannot quantize to %s (supported: F32, F16, BF16, Q8_0, Q4_0)", ErrUnsupportedType, t)
	}
	bs, bb := t.BlockSize(), t.BlockBytes()
	if len(src)%bs != 0 || len(dst) != len(src)/bs*bb {
		return fmt.Errorf("%w: quantizing %d elements to %s needs a multiple of %d elements and %d bytes, got %d bytes",
			ErrFormat, len(src), t, bs, len(src)/bs*bb, len(dst))
	}
	switch t {
	case TypeF32:
		for i, x := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(x))
		}
	case TypeF16:
		for i, x := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(x))
		}
	case TypeBF16:
		for i, x := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(x))
		}
	case TypeQ8_0:
		quantQ8_0(src, dst)
	case TypeQ4_0:
		quantQ4_0(src, dst)
	}
	return nil
}

func quantQ8_0(src []float32, dst []byte) {
	for i := 0; i < len(src)/32; i++ {
		x := src[i*32 : i*32+32]
		b := dst[i*34 : i*34+34]
		var amax float32
		for _, v := range x {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(b, F32ToF16(d))
		for j, v := range x {
			b[2+j] = byte(int8(roundf(v * id)))
		}
	}
}

func quantQ4_0(src []float32, dst []byte) {
	for i := 0; i < len(src)/32; i++ {
		x := src[i*32 : i*32+32]
		b := dst[i*18 : i*18+18]
		var amax, mx float32
		for _, v := range x {
			if a := float32(math.Abs(float64(v))); amax < a {
				amax, mx = a, v
			}
		}
		d := mx / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(b, F32ToF16(d))
		for j := 0; j < 16; j++ {
			x0 := float32(x[j]*id) + 8.5
			x1 := float32(x[j+16]*id) + 8.5
			b[2+j] = min(15, uint8(int8(x0))) | min(15, uint8(int8(x1)))<<4
		}
	}
}

// roundf rounds half away from zero, like C roundf.
func roundf(x float32) float32 { return float32(math.Round(float64(x))) }
