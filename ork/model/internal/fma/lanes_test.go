package fma

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"orkpipe/internal/testfiles"
)

// TestLanesKernels checks the kernels (lanes8, lanes32) against their Go loops (F32, itself checked against math/big)
// bit for bit: lengths 8 to 256, values of every magnitude, lanes whose products land a float32
// midpoint's sliver off it, infinities and NaNs (NaN-ness only: which NaN's payload an FMA keeps is
// not the contract).
func TestLanesKernels(t *testing.T) {
	if !available {
		testfiles.SkipCPU(t, "no AVX2 and FMA: Lanes8 runs in Go")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for n := 8; n <= 256; n += 8 {
		for _, mode := range []string{"random", "midpoints", "specials"} {
			w, x := make([]float32, n), make([]float32, n+5)
			for i := range w {
				w[i] = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(40)-20)))
				x[i] = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(40)-20)))
			}
			var acc0 [8]float32
			for j := range acc0 {
				acc0[j] = float32(r.NormFloat64())
			}
			switch mode {
			case "midpoints": // one step of each lane: acc = 1 + ulp, w·x = ulp/2·(1 - 2^-46)
				for j := range 8 {
					acc0[j] = float32(1 + math.Exp2(-23))
					w[j], x[j] = float32(math.Exp2(-24)*(1+math.Exp2(-23))), float32(1-math.Exp2(-23))
				}
			case "specials":
				for range 3 {
					switch i := r.IntN(n); r.IntN(3) {
					case 0:
						w[i] = float32(math.Inf(1 - 2*r.IntN(2)))
					case 1:
						x[i] = float32(math.NaN())
					default:
						w[i], x[i] = 0, float32(math.Inf(1))
					}
				}
			}
			got, want := acc0, acc0
			lanes8(&w[0], &x[0], n, &got)
			lanes8Go(w, x, &want)
			same(t, fmt.Sprintf("lanes8 n %d %s", n, mode), got[:], want[:])
			if n%32 == 0 {
				var got32, want32 [4][8]float32
				for j := range got32 {
					got32[j], want32[j] = acc0, acc0
					got32[j][j] = float32(j) // the accumulators differ
					want32[j][j] = float32(j)
				}
				lanes32(&w[0], &x[0], n, &got32)
				lanes32Go(w, x, &want32)
				for j := range got32 {
					same(t, fmt.Sprintf("lanes32 n %d %s accumulator %d", n, mode, j), got32[j][:], want32[j][:])
				}
			}
		}
	}
}

// same fails the test unless got and want hold the same bits lane by lane (any NaN matching any NaN).
func same(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for j := range got {
		if math.Float32bits(got[j]) != math.Float32bits(want[j]) && !(got[j] != got[j] && want[j] != want[j]) {
			t.Fatalf("%s: lane %d = %v (%#x), Go %v (%#x)", what, j, got[j], math.Float32bits(got[j]), want[j], math.Float32bits(want[j]))
		}
	}
}

// TestLanesPanics: lengths that are not whole eights (thirty-twos for Lanes32), or an x shorter than w,
// are refused.
func TestLanesPanics(t *testing.T) {
	for _, c := range []struct{ nw, nx int }{{7, 8}, {16, 15}, {24, 32}, {64, 63}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Lanes8 or Lanes32 of %d and %d values: no panic", c.nw, c.nx)
				}
			}()
			if c.nw%32 == 0 || c.nw == 24 {
				var acc [4][8]float32
				Lanes32(make([]float32, c.nw), make([]float32, c.nx), &acc)
				return
			}
			var acc [8]float32
			Lanes8(make([]float32, c.nw), make([]float32, c.nx), &acc)
		}()
	}
}

// TestQ8LanesKernel checks q8Lanes against Q8Lanes's Go loop bit for bit: 1 to 40 blocks of random
// codes over the whole int8 range (-128 included: the sums stay exact), scales of every magnitude
// with zeros, and accumulators that start anywhere.
func TestQ8LanesKernel(t *testing.T) {
	if !available {
		testfiles.SkipCPU(t, "no AVX2 and FMA: Q8Lanes runs in Go")
	}
	r := rand.New(rand.NewPCG(5, 6))
	for n := 1; n <= 40; n++ {
		for _, extreme := range []bool{false, true} {
			wq, xq := make([]int8, 32*n+7), make([]int8, 32*n)
			for i := range xq {
				wq[i], xq[i] = int8(r.IntN(256)-128), int8(r.IntN(256)-128)
				if extreme {
					wq[i], xq[i] = -128, int8(-128+255*r.IntN(2))
				}
			}
			wd, xd := make([]float32, n), make([]float32, n+1)
			for i := range wd {
				wd[i] = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(30)-15)))
				xd[i] = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(30)-15)))
				if r.IntN(9) == 0 {
					wd[i] = 0
				}
			}
			var acc0 [8]float32
			for j := range acc0 {
				acc0[j] = float32(r.NormFloat64() * 1e3)
			}
			got, want := acc0, acc0
			q8Lanes(&wq[0], &xq[0], &wd[0], &xd[0], n, &got)
			q8LanesGo(wq, xq, wd, xd[:n], &want)
			same(t, fmt.Sprintf("q8Lanes %d blocks extreme %v", n, extreme), got[:], want[:])
		}
	}
}

// BenchmarkLanes is one output of a 5120-wide row (a 27B's n_embd): Q8Lanes (160 blocks of Q8_0) and
// Lanes32 (ggml_vec_dot_f32's accumulators), in the kernel and in Go.
func BenchmarkLanes(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	const k = 5120
	wq, xq, wd, xd := make([]int8, k), make([]int8, k), make([]float32, k/32), make([]float32, k/32)
	w, x := make([]float32, k), make([]float32, k)
	for i := range wq {
		wq[i], xq[i] = int8(r.IntN(255)-127), int8(r.IntN(255)-127)
		w[i], x[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	for i := range wd {
		wd[i], xd[i] = float32(r.Float64()/100), float32(r.Float64()/100)
	}
	benchKernels(b, "q8", func() {
		var acc [8]float32
		Q8Lanes(wq, xq, wd, xd, &acc)
	})
	benchKernels(b, "f32", func() {
		var acc [4][8]float32
		Lanes32(w, x, &acc)
	})
}

// benchKernels runs f as the sub-benchmark name/kernel=true with the kernels (where the CPU has them)
// and as name/kernel=false with the Go loops.
func benchKernels(b *testing.B, name string, f func()) {
	on, on16 := available, available16
	defer func() { available, available16 = on, on16 }()
	for _, kernel := range []bool{true, false} {
		if kernel && !on {
			continue
		}
		available, available16 = kernel && on, kernel && on16
		b.Run(fmt.Sprintf("%s/kernel=%v", name, kernel), func(b *testing.B) {
			for b.Loop() {
				f()
			}
		})
	}
}

// TestQ8Lanes4 checks Q8Lanes4, kernel and Go loop, against Q8Lanes on each of its four inputs bit for
// bit: 1 to 40 blocks of codes over the whole int8 range, scales of every magnitude with zeros, an
// input given twice, accumulators that start anywhere.
func TestQ8Lanes4(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	for n := 1; n <= 40; n++ {
		wq, wd := make([]int8, 32*n), make([]float32, n)
		var x8 [4][]int8
		var xq [4][]int16
		var xd [4][]float32
		for i := range wq {
			wq[i] = int8(r.IntN(256) - 128)
		}
		for b := range wd {
			wd[b] = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(30)-15)))
			if r.IntN(9) == 0 {
				wd[b] = 0
			}
		}
		for tk := range 3 {
			x8[tk], xq[tk], xd[tk] = make([]int8, 32*n), make([]int16, 32*n), make([]float32, n)
			for i := range x8[tk] {
				x8[tk][i] = int8(r.IntN(256) - 128)
				xq[tk][i] = int16(x8[tk][i])
			}
			for b := range xd[tk] {
				xd[tk][b] = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(30)-15)))
			}
		}
		x8[3], xq[3], xd[3] = x8[1], xq[1], xd[1] // an input twice
		var acc0 [4][8]float32
		for tk := range acc0 {
			for j := range acc0[tk] {
				acc0[tk][j] = float32(r.NormFloat64() * 1e3)
			}
		}
		var got [2][4][8]float32
		withKernels(t, func(kernel bool) {
			got[b2i(kernel)] = acc0
			Q8Lanes4(wq, wd, &xq, &xd, &got[b2i(kernel)])
		})
		for tk := range 4 {
			want := acc0[tk]
			Q8Lanes(wq, x8[tk], wd, xd[tk], &want)
			what := fmt.Sprintf("Q8Lanes4 %d blocks input %d", n, tk)
			same(t, what+" (Go)", got[0][tk][:], want[:])
			same(t, what+" (kernel)", got[1][tk][:], want[:])
		}
	}
}

// TestDot8 checks Dot8's kernel (the horizontal sum in registers) against Lanes8 and Hsum8 bit for bit:
// lengths 8 to 256, values of every magnitude with specials (NaN-ness only).
func TestDot8(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	for n := 8; n <= 256; n += 8 {
		for _, specials := range []bool{false, true} {
			w, x := values(r, n, specials), values(r, n+3, specials)
			var acc [8]float32
			Lanes8(w, x, &acc)
			want := Hsum8(&acc)
			var got [2]float32
			withKernels(t, func(kernel bool) { got[b2i(kernel)] = Dot8(w, x) })
			same(t, fmt.Sprintf("Dot8 n %d specials %v", n, specials), got[:], []float32{want, want})
		}
	}
}
