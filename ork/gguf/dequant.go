package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// dequantizable lists the types Dequantize implements (the types source models come in).
var dequantizable = []Type{TypeF32, TypeF16, TypeBF16, TypeF64, TypeQ8_0, TypeQ4_0, TypeQ4_1,
	TypeQ5_0, TypeQ5_1, TypeQ4_K, TypeQ5_K, TypeQ6_K}

// CanDequantize reports whether Dequantize supports t.
func CanDequantize(t Type) bool {
	for _, d := range dequantizable {
		if d == t {
			return true
		}
	}
	return false
}

func dequantizableNames() string {
	names := make([]string, len(dequantizable))
	for i, t := range dequantizable {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}

// Dequantize decodes len(dst) elements of type t from src into dst as float32. len(dst) must
// be a multiple of t's block size and len(src) exactly the encoded size of len(dst) elements.
// Decoding follows ggml's dequantize_row_* reference; multiply-adds are rounded separately
// (never fused), so results are the same on every architecture.
func Dequantize(t Type, src []byte, dst []float32) error {
	if !CanDequantize(t) {
		return fmt.Errorf("%w: cannot dequantize type %s (supported: %s)", ErrUnsupportedType, t, dequantizableNames())
	}
	bs, bb := t.BlockSize(), t.BlockBytes()
	if len(dst)%bs != 0 {
		return fmt.Errorf("%w: %d elements of %s is not a multiple of the block size %d", ErrFormat, len(dst), t, bs)
	}
	nb := len(dst) / bs
	if len(src) != nb*bb {
		return fmt.Errorf("%w: %d elements of %s need %d bytes, got %d", ErrFormat, len(dst), t, nb*bb, len(src))
	}
	switch t {
	case TypeF32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case TypeF16:
		f16ToF32s(dst, src[:2*len(dst)])
	case TypeBF16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(src[2*i])<<16 | uint32(src[2*i+1])<<24)
		}
	case TypeF64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
		}
	case TypeQ8_0:
		dequantQ8_0(src, dst, nb)
	case TypeQ4_0:
		dequantQ4_0(src, dst, nb)
	case TypeQ4_1:
		dequantQ4_1(src, dst, nb)
	case TypeQ5_0:
		dequantQ5_0(src, dst, nb)
	case TypeQ5_1:
		dequantQ5_1(src, dst, nb)
	case TypeQ4_K:
		dequantQ4_K(src, dst, nb)
	case TypeQ5_K:
		dequantQ5_K(src, dst, nb)
	case TypeQ6_K:
		dequantQ6_K(src, dst, nb)
	}
	return nil
}

func le16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }

// dequantQ8_0 decodes nb Q8_0 blocks: by the AVX2 kernel where the CPU has one, else dequantQ8_0Go;
// both give the same bits (TestDequantQ8_0Kernel, FuzzDequantQ8_0Kernel).
func dequantQ8_0(src []byte, dst []float32, nb int) {
	if !q8Kernel(dst, src, nb) {
		dequantQ8_0Go(src, dst, nb)
	}
}

// dequantQ8_0Go is the reference decoder: y[j] = d·float32(q[j]), one rounding per value.
func dequantQ8_0Go(src []byte, dst []float32, nb int) {
	tab := f16tab()
	for i := 0; i < nb; i++ {
		b := (*[34]byte)(src[i*34:])
		y := (*[32]float32)(dst[i*32:])
		d := tab[uint16(b[0])|uint16(b[1])<<8]
		q := (*[32]byte)(b[2:])
		for j := range y {
			y[j] = d * float32(int8(q[j]))
		}
	}
}

func dequantQ4_0(src []byte, dst []float32, nb int) {
	tab := f16tab()
	for i := 0; i < nb; i++ {
		b := (*[18]byte)(src[i*18:])
		y := (*[32]float32)(dst[i*32:])
		d := tab[uint16(b[0])|uint16(b[1])<<8]
		q := (*[16]byte)(b[2:])
		for j := 0; j < 16; j++ {
			y[j] = float32(int32(q[j]&0xF)-8) * d
			y[j+16] = float32(int32(q[j]>>4)-8) * d
		}
	}
}

func dequantQ4_1(src []byte, dst []float32, nb int) {
	tab := f16tab()
	for i := 0; i < nb; i++ {
		b := src[i*20 : i*20+20 : i*20+20]
		y := dst[i*32 : i*32+32 : i*32+32]
		d, m := tab[le16(b)], tab[le16(b[2:])]
		q := b[4:20]
		for j := 0; j < 16; j++ {
			y[j] = float32(float32(q[j]&0xF)*d) + m
			y[j+16] = float32(float32(q[j]>>4)*d) + m
		}
	}
}

func dequantQ5_0(src []byte, dst []float32, nb int) {
	tab := f16tab()
	for i := 0; i < nb; i++ {
		b := src[i*22 : i*22+22 : i*22+22]
		y := dst[i*32 : i*32+32 : i*32+32]
		d := tab[le16(b)]
		qh := binary.LittleEndian.Uint32(b[2:6])
		q := b[6:22]
		for j := 0; j < 16; j++ {
			xh0 := byte((qh>>uint(j))<<4) & 0x10
			xh1 := byte(qh>>uint(j+12)) & 0x10
			y[j] = float32(int32(q[j]&0xF|xh0)-16) * d
			y[j+16] = float32(int32(q[j]>>4|xh1)-16) * d
		}
	}
}

func dequantQ5_1(src []byte, dst []float32, nb int) {
	tab := f16tab()
	for i := 0; i < nb; i++ {
		b := src[i*24 : i*24+24 : i*24+24]
		y := dst[i*32 : i*32+32 : i*32+32]
		d, m := tab[le16(b)], tab[le16(b[2:])]
		qh := binary.LittleEndian.Uint32(b[4:8])
		q := b[8:24]
		for j := 0; j < 16; j++ {
			xh0 := byte((qh>>uint(j))<<4) & 0x10
			xh1 := byte(qh>>uint(j+12)) & 0x10
			y[j] = float32(float32(q[j]&0xF|xh0)*d) + m
			y[j+16] = float32(float32(q[j]>>4|xh1)*d) + m
		}
	}
}

// scaleMinK4 unpacks the j-th 6-bit scale and min of a Q4_K/Q5_K block (get_scale_min_k4).
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xF | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

func dequantQ4_K(src []byte, dst []float32, nb int) {
	tab := f16tab()
	const bb = 144
	for i := 0; i < nb; i++ {
		b := (*[bb]byte)(src[i*bb:])
		y := (*[qkK]float32)(dst[i*qkK:])
		d, dmin := tab[le16(b[0:2])], tab[le16(b[2:4])]
		scales := b[4:16]
		for j, is := 0, 0; j < qkK; j, is = j+64, is+2 {
			sc, m := scaleMinK4(is, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(is+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			qq := (*[32]byte)(b[16+j/2:])
			yy := (*[64]float32)(y[j:])
			for l := 0; l < 32; l++ {
				yy[l] = float32(d1*float32(qq[l]&0xF)) - m1
				yy[l+32] = float32(d2*float32(qq[l]>>4)) - m2
			}
		}
	}
}

func dequantQ5_K(src []byte, dst []float32, nb int) {
	tab := f16tab()
	const bb = 176
	for i := 0; i < nb; i++ {
		b := src[i*bb : i*bb+bb : i*bb+bb]
		y := dst[i*qkK : i*qkK+qkK : i*qkK+qkK]
		d, dmin := tab[le16(b)], tab[le16(b[2:])]
		scales := b[4:16]
		qh := b[16:48]
		ql := b[48:176]
		u1, u2 := uint8(1), uint8(2)
		for j, is := 0, 0; j < qkK; j, is = j+64, is+2 {
			sc, m := scaleMinK4(is, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(is+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			qq := ql[j/2 : j/2+32]
			yy := y[j : j+64]
			for l := 0; l < 32; l++ {
				h1, h2 := uint8(0), uint8(0)
				if qh[l]&u1 != 0 {
					h1 = 16
				}
				if qh[l]&u2 != 0 {
					h2 = 16
				}
				yy[l] = float32(d1*float32(qq[l]&0xF+h1)) - m1
				yy[l+32] = float32(d2*float32(qq[l]>>4+h2)) - m2
			}
			u1 <<= 2
			u2 <<= 2
		}
	}
}

func dequantQ6_K(src []byte, dst []float32, nb int) {
	tab := f16tab()
	const bb = 210
	for i := 0; i < nb; i++ {
		b := (*[bb]byte)(src[i*bb:])
		y := (*[qkK]float32)(dst[i*qkK:])
		d := tab[le16(b[208:210])]
		for n := 0; n < 2; n++ {
			l8 := (*[64]byte)(b[n*64:])
			h8 := (*[32]byte)(b[128+n*32:])
			s8 := (*[8]byte)(b[192+n*8:])
			yy := (*[128]float32)(y[n*128:])
			for half := 0; half < 2; half++ {
				// ggml computes d * scale * q left to right; keep that rounding order.
				s1, s2 := d*float32(int8(s8[half])), d*float32(int8(s8[half+2]))
				s3, s4 := d*float32(int8(s8[half+4])), d*float32(int8(s8[half+6]))
				for l := half * 16; l < half*16+16; l++ {
					h := h8[l]
					q1 := int32(l8[l]&0xF|(h&3)<<4) - 32
					q2 := int32(l8[l+32]&0xF|(h>>2&3)<<4) - 32
					q3 := int32(l8[l]>>4|(h>>4&3)<<4) - 32
					q4 := int32(l8[l+32]>>4|(h>>6&3)<<4) - 32
					yy[l] = s1 * float32(q1)
					yy[l+32] = s2 * float32(q2)
					yy[l+64] = s3 * float32(q3)
					yy[l+96] = s4 * float32(q4)
				}
			}
		}
	}
}
