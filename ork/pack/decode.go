package pack

import (
	"fmt"
	"math"
)

// Decode turns an entry's verified data (Length bytes, as ReadEntry returns it) back into codes and scales.
// Codes go through the same untiler walk the writer used; padding and trailing bytes must be zero.
func Decode(e Entry, data []byte) (Weight, error) {
	w := Weight{Meta: e.Meta}
	if e.DType == F16 {
		w.F16 = make([]uint16, e.K*e.N)
	} else {
		w.Codes = make([]int8, e.K*e.N)
	}
	w.Scales = make([]float32, e.ScalesLength/4)
	if err := decodeInto(e, data, &w); err != nil {
		return Weight{}, err
	}
	if e.ScalesLength == 0 {
		w.Scales = nil
	}
	return w, nil
}

// decodeInto is Decode into w's buffers, which must have the entry's lengths: Codes (or F16) K·N,
// Scales ScalesLength/4.
func decodeInto(e Entry, data []byte, w *Weight) error {
	if int64(len(data)) != e.Length {
		return fmt.Errorf("%w: entry %q: %d bytes, want %d", ErrCorrupt, e.Name, len(data), e.Length)
	}
	if err := decodeCodes(e, data[:e.CodesLength], w); err != nil {
		return fmt.Errorf("%w: entry %q: %v", ErrCorrupt, e.Name, err)
	}
	return decodeScales(e, data, w.Scales)
}

// checkData rejects exactly what decodeInto rejects in data, without decoding the codes: the length,
// and through dataCheck the padding codes, the page padding and the scales (the untiler's only
// rejections are the layout size, a non-zero padding code and a non-zero page-padding byte; every other
// byte pattern decodes).
func checkData(e Entry, data []byte) error {
	if int64(len(data)) != e.Length {
		return fmt.Errorf("%w: entry %q: %d bytes, want %d", ErrCorrupt, e.Name, len(data), e.Length)
	}
	c, err := newDataCheck(e)
	if err != nil {
		return err
	}
	return c.check(0, data)
}

// decodeScales checks the scales of an entry's data (each finite, the page padding after them zero) and
// stores them in dst when it is not nil (ScalesLength/4 values).
func decodeScales(e Entry, data []byte, dst []float32) error {
	sb := data[e.ScalesOffset : e.ScalesOffset+e.ScalesLength]
	for i := range int(e.ScalesLength / 4) {
		bits := le.Uint32(sb[4*i:])
		if bits>>23&0xff == 0xff { // exponent all ones: NaN or ±Inf
			return fmt.Errorf("%w: entry %q: scale %d is %v", ErrCorrupt, e.Name, i, math.Float32frombits(bits))
		}
		if dst != nil {
			dst[i] = math.Float32frombits(bits)
		}
	}
	for i, c := range data[e.ScalesOffset+e.ScalesLength:] {
		if c != 0 {
			return fmt.Errorf("%w: entry %q: scales padding byte %d is %#02x", ErrCorrupt, e.Name, i, c)
		}
	}
	return nil
}

func decodeCodes(e Entry, codes []byte, w *Weight) error {
	l, err := e.Layout()
	if err != nil {
		return err
	}
	if e.DType == F16 {
		return l.UntileF16(w.F16, codes)
	}
	return l.Untile(w.Codes, codes)
}

// Dequantize returns the float weights row-major [N][K]: code * scale of its group, or the F16 values.
func (w Weight) Dequantize() []float32 {
	out := make([]float32, w.K*w.N)
	if w.DType == F16 {
		for i, h := range w.F16 {
			out[i] = HalfToFloat(h)
		}
		return out
	}
	g := w.Groups()
	for n := 0; n < w.N; n++ {
		for k := 0; k < w.K; k++ {
			gi := 0
			if w.Group > 0 {
				gi = k / w.Group
			}
			out[n*w.K+k] = float32(w.Codes[n*w.K+k]) * w.Scales[n*g+gi]
		}
	}
	return out
}

// HalfToFloat converts an IEEE-754 binary16 bit pattern to float32.
func HalfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := int(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: mant * 2^-24
		v := float32(mant) / (1 << 24)
		if sign != 0 {
			v = -v
		}
		return v
	case exp == 31:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | uint32(exp-15+127)<<23 | mant<<13)
}
