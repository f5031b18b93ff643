package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// ggml block geometry (GGUF layout, little-endian).
const (
	QK8_0        = 32 // values per Q8_0 block
	BlockQ8_0    = 34 // bytes: fp16 d, 32 x int8
	QK4_0        = 32 // values per Q4_0 block
	BlockQ4_0    = 18 // bytes: fp16 d, 16 bytes of nibbles
	QKK          = 256
	BlockQ4K     = 144 // bytes: fp16 d, fp16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
	kScaleSizeQ4 = 12
)

func checkBlocks(kind string, n, qk, blockBytes, dstLen int) error {
	if n%qk != 0 {
		return fmt.Errorf("%s: row of %d values is not a multiple of %d: %w", kind, n, qk, ErrShape)
	}
	if dstLen != n/qk*blockBytes {
		return fmt.Errorf("%s: %d bytes for %d values, want %d: %w", kind, dstLen, n, n/qk*blockBytes, ErrShape)
	}
	return nil
}

// QuantizeQ8_0 encodes x (a multiple of 32 values) into dst as llama.cpp's
// quantize_row_q8_0_ref does: d = amax/127, codes roundf(x·(1/d)), d stored as fp16.
func QuantizeQ8_0(dst []byte, x []float32) error {
	if err := checkBlocks("Q8_0", len(x), QK8_0, BlockQ8_0, len(dst)); err != nil {
		return err
	}
	for i := 0; i < len(x)/QK8_0; i++ {
		xb := x[i*QK8_0 : (i+1)*QK8_0]
		b := dst[i*BlockQ8_0 : (i+1)*BlockQ8_0]
		var amax float32
		for _, v := range xb {
			amax = max(amax, abs32(v))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(b, FP32ToFP16(d))
		for j, v := range xb {
			b[2+j] = byte(int8(math.Round(float64(float32(v * id)))))
		}
	}
	return nil
}

// DequantizeQ8_0 decodes Q8_0 blocks into dst (len(src)/34·32 values).
func DequantizeQ8_0(dst []float32, src []byte) error {
	if err := checkBlocks("Q8_0", len(dst), QK8_0, BlockQ8_0, len(src)); err != nil {
		return err
	}
	for i := 0; i < len(dst)/QK8_0; i++ {
		b := src[i*BlockQ8_0 : (i+1)*BlockQ8_0]
		d := FP16ToFP32(binary.LittleEndian.Uint16(b))
		for j := 0; j < QK8_0; j++ {
			dst[i*QK8_0+j] = float32(int8(b[2+j])) * d
		}
	}
	return nil
}

// QuantizeQ4_0 encodes x (a multiple of 32 values) into dst as llama.cpp's
// quantize_row_q4_0_ref does: d = max/-8 with max the signed value of largest magnitude (first
// one on ties), codes min(15, (int8)(x·(1/d) + 8.5)), low nibbles = first 16 values.
func QuantizeQ4_0(dst []byte, x []float32) error {
	if err := checkBlocks("Q4_0", len(x), QK4_0, BlockQ4_0, len(dst)); err != nil {
		return err
	}
	for i := 0; i < len(x)/QK4_0; i++ {
		xb := x[i*QK4_0 : (i+1)*QK4_0]
		b := dst[i*BlockQ4_0 : (i+1)*BlockQ4_0]
		var amax, mx float32
		for _, v := range xb {
			if amax < abs32(v) {
				amax, mx = abs32(v), v
			}
		}
		d := mx / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(b, FP32ToFP16(d))
		for j := 0; j < QK4_0/2; j++ {
			x0 := float32(xb[j] * id)
			x1 := float32(xb[QK4_0/2+j] * id)
			b[2+j] = q4nib(x0) | q4nib(x1)<<4
		}
	}
	return nil
}

// q4nib is MIN(15, (int8_t)(v + 8.5f)): C's float-to-integer conversion truncates toward zero.
func q4nib(v float32) byte {
	t := int8(float32(v + 8.5))
	return byte(min(15, t))
}

// DequantizeQ4_0 decodes Q4_0 blocks into dst.
func DequantizeQ4_0(dst []float32, src []byte) error {
	if err := checkBlocks("Q4_0", len(dst), QK4_0, BlockQ4_0, len(src)); err != nil {
		return err
	}
	for i := 0; i < len(dst)/QK4_0; i++ {
		b := src[i*BlockQ4_0 : (i+1)*BlockQ4_0]
		d := FP16ToFP32(binary.LittleEndian.Uint16(b))
		for j := 0; j < QK4_0/2; j++ {
			dst[i*QK4_0+j] = float32(int(b[2+j]&0xf)-8) * d
			dst[i*QK4_0+QK4_0/2+j] = float32(int(b[2+j]>>4)-8) * d
		}
	}
	return nil
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// nearestInt is ggml's nearest_int: round half to even through the 1.5·2²³ trick (valid for
// |v| <= 4194303).
func nearestInt(v float32) int {
	val := float32(v + 12582912)
	return int(math.Float32bits(val)&0x007fffff) - 0x00400000
}
