package fma

import (
	"encoding/binary"
	"math"
	"testing"

	"orkpipe/internal/testfiles"
)

// floats reads data as little-endian float32 bit patterns (every one, NaNs and infinities
// included), dropping a last partial value.
func floats(data []byte) []float32 {
	x := make([]float32, len(data)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return x
}

// FuzzKernels runs every kernel of the package on values made of the fuzzer's bytes (any bit pattern)
// and compares it with its Go loop (withKernels), NaN-ness only for NaNs: AxpyRows (widths and row
// counts from the first bytes, the stride a little wider), Round16, AxpyRound16, ScaleRound16, Scale,
// SiLU with and without its gate, Lanes8, Dot8, Lanes32, Q8Lanes and Q8Lanes4.
func FuzzKernels(f *testing.F) {
	f.Add(uint8(9), uint8(3), uint8(2), make([]byte, 512))
	f.Add(uint8(64), uint8(2), uint8(0), []byte("\x00\x00\x80\x3f\x00\x00\xc0\x7f\xff\xff\x7f\x7f\x01\x00\x00\x00\x00\x00\x80\xff\x33\x33\x33\x43\xa4\x70\x9d\xc3"))
	f.Fuzz(func(t *testing.T, width, rows, pad uint8, data []byte) {
		if !available {
			testfiles.SkipCPU(t, "no AVX2 and FMA: the Go loops are the only path")
		}
		x := floats(data)
		if len(x) < 2 {
			return
		}
		p := x[0]
		w, n := int(width)%80+1, int(rows)%9+1
		stride := w + int(pad)%5
		if need := (n-1)*stride + w; len(x) >= need+n {
			v, ps := x[len(x)-need:], x[:n]
			var out [2][]float32
			withKernels(t, func(kernel bool) {
				acc := append([]float32(nil), x[n:n+w]...)
				AxpyRows(acc, v, stride, ps)
				out[b2i(kernel)] = acc
			})
			same(t, "AxpyRows", out[1], out[0])
		}
		ops := []struct {
			name string
			f    func(y []float32)
		}{
			{"Round16", Round16},
			{"AxpyRound16", func(y []float32) { AxpyRound16(y, x, p) }},
			{"ScaleRound16", func(y []float32) { ScaleRound16(y, p) }},
			{"Scale", func(y []float32) { Scale(y, p) }},
			{"SiLU", func(y []float32) { SiLU(y[:len(y)&^7], x[:len(y)&^7], nil) }},
			{"SiLU gated", func(y []float32) { SiLU(y[:len(y)&^7], y[:len(y)&^7], x[:len(y)&^7]) }},
		}
		for _, op := range ops {
			var out [2][]float32
			withKernels(t, func(kernel bool) {
				y := append([]float32(nil), x[1:]...)
				op.f(y[:len(x)-1])
				out[b2i(kernel)] = y
			})
			same(t, op.name, out[1], out[0])
		}
		if m := len(x) &^ 31; m > 0 {
			var l8 [2][8]float32
			var l32 [2][4][8]float32
			withKernels(t, func(kernel bool) {
				copy(l8[b2i(kernel)][:], x)
				Lanes8(x[:m], x[len(x)-m:], &l8[b2i(kernel)])
				Lanes32(x[len(x)-m:], x[:m], &l32[b2i(kernel)])
			})
			same(t, "Lanes8", l8[1][:], l8[0][:])
			var d8 [2]float32
			withKernels(t, func(kernel bool) { d8[b2i(kernel)] = Dot8(x[:m], x[len(x)-m:]) })
			same(t, "Dot8", d8[1:], d8[:1])
			for j := range l32[0] {
				same(t, "Lanes32", l32[1][j][:], l32[0][j][:])
			}
		}
		if blocks := len(data) / 72; blocks > 0 { // per block: 32 codes of w, 32 of x, two scales
			wq, xq := make([]int8, 32*blocks), make([]int8, 32*blocks)
			wd, xd := make([]float32, blocks), make([]float32, blocks)
			for b := range blocks {
				d := data[72*b:]
				for i := range 32 {
					wq[32*b+i], xq[32*b+i] = int8(d[i]), int8(d[32+i])
				}
				wd[b], xd[b] = math.Float32frombits(binary.LittleEndian.Uint32(d[64:])), math.Float32frombits(binary.LittleEndian.Uint32(d[68:]))
			}
			var acc [2][8]float32
			withKernels(t, func(kernel bool) {
				acc[b2i(kernel)] = [8]float32{p, p, p, p, p, p, p, p}
				Q8Lanes(wq, xq, wd, xd, &acc[b2i(kernel)])
			})
			same(t, "Q8Lanes", acc[1][:], acc[0][:])
			x16, w16 := make([]int16, len(xq)), make([]int16, len(wq)) // Q8Lanes4: inputs x, w, x, w against w's rows
			for i := range xq {
				x16[i], w16[i] = int16(xq[i]), int16(wq[i])
			}
			var acc4 [2][4][8]float32
			withKernels(t, func(kernel bool) {
				Q8Lanes4(wq, wd, &[4][]int16{x16, w16, x16, w16}, &[4][]float32{xd, wd, xd, wd}, &acc4[b2i(kernel)])
			})
			for j := range acc4[0] {
				same(t, "Q8Lanes4", acc4[1][j][:], acc4[0][j][:])
			}
		}
	})
}
