package quant

import (
	"encoding/binary"
	"math"
)

// QuantizeQ4K encodes x (a multiple of 256 values) into dst as llama.cpp's
// quantize_row_q4_K_ref does (no importance matrix): per 32-value sub-block make_qkx2_quants
// with weights av_x + |x|, rmin -1, rdelta 0.1, 20 steps; 6-bit sub-block scales and mins
// against fp16 super-block d and dmin; codes recomputed from the rounded scales.
//
// Every float operation is a separately rounded float32 operation in the C statement order.
// Known difference: where the C compiler contracts a·b+c into a fused multiply-add (GCC does by
// default when the target has FMA), an element whose value sits on a rounding boundary can get a
// different code or sub-block scale. llama.cpp's ggml-base (where the _ref quantizers live) is
// built for the baseline ISA, without FMA, on x86-64.
func QuantizeQ4K(dst []byte, x []float32) error {
	if err := checkBlocks("Q4_K", len(x), QKK, BlockQ4K, len(dst)); err != nil {
		return err
	}
	var (
		L       [QKK]uint8
		laux    [32]uint8
		weights [32]float32
		mins    [8]float32
		scales  [8]float32
	)
	for i := 0; i < len(x)/QKK; i++ {
		xb := x[i*QKK : (i+1)*QKK]
		y := dst[i*BlockQ4K : (i+1)*BlockQ4K]
		for j := range y {
			y[j] = 0
		}
		var maxScale, maxMin float32
		for j := 0; j < 8; j++ {
			xs := xb[32*j : 32*j+32]
			var sumX2 float32
			for _, v := range xs {
				sumX2 = float32(sumX2 + float32(v*v))
			}
			avX := float32(math.Sqrt(float64(sumX2 / 32)))
			for l, v := range xs {
				weights[l] = avX + abs32(v)
			}
			scales[j] = makeQKX2Quants(15, xs, weights[:], L[32*j:32*j+32], &mins[j], laux[:], -1, 0.1, 20)
			maxScale = max(maxScale, scales[j])
			maxMin = max(maxMin, mins[j])
		}
		var invScale, invMin float32
		if maxScale > 0 {
			invScale = 63 / maxScale
		}
		if maxMin > 0 {
			invMin = 63 / maxMin
		}
		sc := y[4 : 4+kScaleSizeQ4]
		for j := 0; j < 8; j++ {
			ls := min(63, uint8(nearestInt(float32(invScale*scales[j]))))
			lm := min(63, uint8(nearestInt(float32(invMin*mins[j]))))
			if j < 4 {
				sc[j] = ls
				sc[j+4] = lm
			} else {
				sc[j+4] = (ls & 0xf) | (lm&0xf)<<4
				sc[j-4] |= (ls >> 4) << 6
				sc[j] |= (lm >> 4) << 6
			}
		}
		binary.LittleEndian.PutUint16(y[0:], FP32ToFP16(maxScale/63))
		binary.LittleEndian.PutUint16(y[2:], FP32ToFP16(maxMin/63))
		dd := FP16ToFP32(binary.LittleEndian.Uint16(y[0:]))
		dmin := FP16ToFP32(binary.LittleEndian.Uint16(y[2:]))
		for j := 0; j < 8; j++ {
			s, m := scaleMinK4(j, sc)
			d := float32(dd * float32(s))
			if d == 0 {
				continue // keeps make_qkx2_quants' codes, as the reference does
			}
			dm := float32(dmin * float32(m))
			for ii := 0; ii < 32; ii++ {
				l := nearestInt(float32(float32(xb[32*j+ii]+dm) / d))
				L[32*j+ii] = uint8(max(0, min(15, l)))
			}
		}
		q := y[4+kScaleSizeQ4:]
		for j := 0; j < QKK; j += 64 {
			for l := 0; l < 32; l++ {
				q[l] = L[j+l] | L[j+l+32]<<4
			}
			q = q[32:]
		}
	}
	return nil
}

// scaleMinK4 is ggml's get_scale_min_k4.
func scaleMinK4(j int, q []byte) (d, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return (q[j+4] & 0xf) | (q[j-4]>>6)<<4, (q[j+4] >> 4) | (q[j]>>6)<<4
}

// makeQKX2Quants is ggml's make_qkx2_quants with use_mad = false, in float32.
func makeQKX2Quants(nmax int, x, weights []float32, L []uint8, theMin *float32, laux []uint8, rmin, rdelta float32, nstep int) float32 {
	n := len(x)
	mn, mx := x[0], x[0]
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		if x[i] < mn {
			mn = x[i]
		}
		if x[i] > mx {
			mx = x[i]
		}
		w := weights[i]
		sumW += w
		sumX = float32(sumX + float32(w*x[i]))
	}
	if mn > 0 {
		mn = 0
	}
	if mx == mn {
		for i := range L[:n] {
			L[i] = 0
		}
		*theMin = -mn
		return 0
	}
	fn := float32(nmax)
	iscale := fn / float32(mx-mn)
	scale := 1 / iscale
	var bestMad float32
	for i := 0; i < n; i++ {
		l := nearestInt(float32(iscale * float32(x[i]-mn)))
		L[i] = uint8(max(0, min(nmax, l)))
		diff := float32(float32(float32(scale*float32(L[i]))+mn) - x[i])
		diff = float32(diff * diff)
		bestMad = float32(bestMad + float32(weights[i]*diff))
	}
	if nstep < 1 {
		*theMin = -mn
		return scale
	}
	for is := 0; is <= nstep; is++ {
		iscale = float32(float32(rmin+float32(rdelta*float32(is)))+fn) / float32(mx-mn)
		var sumL, sumL2, sumXL float32
		for i := 0; i < n; i++ {
			l := max(0, min(nmax, nearestInt(float32(iscale*float32(x[i]-mn)))))
			laux[i] = uint8(l)
			w := weights[i]
			fl := float32(l)
			wl := float32(w * fl)
			sumL = float32(sumL + wl)
			sumL2 = float32(sumL2 + float32(wl*fl))
			sumXL = float32(sumXL + float32(wl*x[i]))
		}
		D := float32(float32(sumW*sumL2) - float32(sumL*sumL))
		if D > 0 {
			thisScale := float32(float32(sumW*sumXL)-float32(sumX*sumL)) / D
			thisMin := float32(float32(sumL2*sumX)-float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var mad float32
			for i := 0; i < n; i++ {
				diff := float32(float32(float32(thisScale*float32(laux[i]))+thisMin) - x[i])
				diff = float32(diff * diff)
				mad = float32(mad + float32(weights[i]*diff))
			}
			if mad < bestMad {
				copy(L[:n], laux[:n])
				bestMad = mad
				scale = thisScale
				mn = thisMin
			}
		}
	}
	*theMin = -mn
	return scale
}

// DequantizeQ4K decodes Q4_K blocks into dst.
func DequantizeQ4K(dst []float32, src []byte) error {
	if err := checkBlocks("Q4_K", len(dst), QKK, BlockQ4K, len(src)); err != nil {
		return err
	}
	for i := 0; i < len(dst)/QKK; i++ {
		b := src[i*BlockQ4K : (i+1)*BlockQ4K]
		d := FP16ToFP32(binary.LittleEndian.Uint16(b[0:]))
		dmin := FP16ToFP32(binary.LittleEndian.Uint16(b[2:]))
		sc := b[4 : 4+kScaleSizeQ4]
		q := b[4+kScaleSizeQ4:]
		y := dst[i*QKK:]
		is := 0
		for j := 0; j < QKK; j += 64 {
			s1, m1 := scaleMinK4(is, sc)
			s2, m2 := scaleMinK4(is+1, sc)
			d1, mm1 := d*float32(s1), dmin*float32(m1)
			d2, mm2 := d*float32(s2), dmin*float32(m2)
			for l := 0; l < 32; l++ {
				y[j+l] = d1*float32(q[l]&0xf) - mm1
				y[j+32+l] = d2*float32(q[l]>>4) - mm2
			}
			q = q[32:]
			is += 2
		}
	}
	return nil
}
