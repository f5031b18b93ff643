package sgemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"orkpipe/internal/testfiles"
)

// values returns n float32 values of mixed signs and magnitudes (so that the order of the sums shows in
// the last bits), with some zeros and negative zeros.
func values(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		switch r.IntN(40) {
		case 0:
			v[i] = 0
		case 1:
			v[i] = float32(math.Copysign(0, -1))
		default:
			v[i] = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(12)-6)))
		}
	}
	return v
}

// gonumNT is the reference: gonum's own Sgemm, whatever blas32 is registered to.
func gonumNT(m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gonum.Implementation{}.Sgemm(blas.NoTrans, blas.Trans, m, n, k, 1, a, lda, b, ldb, beta, c, ldc)
}

// TestNTMatchesGonum checks NT against gonum's Sgemm bit for bit (signed zeros included) on amd64, where
// gonum sums with its SSE DotUnitary, over shapes on both of gonum's paths (whole K; slices of 64), odd
// and even rows, columns beyond whole fours, K of whole sixteens and not, B on and off 16-byte
// boundaries, strides wider than the rows, beta 0 and 1, one and several goroutines (and NTSerial
// where NT would have several), packed rows of B
// (A of packRows rows or more: K in blocks of blockK or whole, rows of A in threes and one or two past
// them, on AVX-512 columns beyond whole sixteens) and not, and every set of kernels this CPU can
// run.
func TestNTMatchesGonum(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testfiles.SkipBuild(t, "gonum's Sgemm sums in this order only on amd64 (elsewhere its DotUnitary is a plain loop); TestDotMatchesKernels covers NT there")
	}
	r := rand.New(rand.NewPCG(1, 2))
	shapes := [][3]int{
		{1, 1, 1}, {1, 4, 16}, {2, 4, 16}, {3, 7, 33}, {5, 9, 64}, {16, 260, 1024}, {15, 260, 512},
		{128, 256, 1024}, {64, 64, 64}, {130, 70, 200}, {7, 300, 48}, {2, 8, 3}, {65, 129, 1040}, {1, 512, 64},
		{200, 4, 80}, {3, 12, 16}, {1, 1, 2000}, {8, 12, 17}, {20, 24, 1024}, {64, 260, 1552},
		{5, 40, 2}, {33, 48, 8}, {3, 32, 12}, {64, 130, 8},
	}
	// -short (internal/avx2host's emulated run) and -race keep an aligned and an unaligned B, one
	// goroutine and three (NTSerial among them).
	offs, procsList := []int{0, 1, 2, 3, 4}, []int{1, 2, 3}
	if testing.Short() || raceEnabled {
		offs, procsList = []int{0, 1}, []int{1, 3}
	}
	for _, s := range shapes {
		for _, off := range offs { // B's first value off values past a 16-byte boundary
			for _, pad := range []int{0, 5} {
				for _, beta := range []float32{0, 1} {
					for _, procs := range procsList {
						m, n, k := s[0], s[1], s[2]
						lda, ldb, ldc := k+pad, k+pad*4, n+pad
						a := values(r, (m-1)*lda+k)
						b := values(r, off+(n-1)*ldb+k+16)[off:]
						c0 := values(r, (m-1)*ldc+n)
						want := append([]float32(nil), c0...)
						gonumNT(m, n, k, a, lda, b, ldb, beta, want, ldc)
						forKernels(t, func(kernels string) {
							got := append([]float32(nil), c0...)
							prev := runtime.GOMAXPROCS(procs)
							if procs == 3 && off%2 == 0 {
								NTSerial(m, n, k, a, lda, b, ldb, beta, got, ldc)
							} else {
								NT(m, n, k, a, lda, b, ldb, beta, got, ldc)
							}
							runtime.GOMAXPROCS(prev)
							for i := range want {
								if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
									t.Fatalf("m %d n %d k %d off %d pad %d beta %v procs %d, %s: c[%d] = %v (%#x), gonum %v (%#x)",
										m, n, k, off, pad, beta, procs, kernels, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
								}
							}
						})
					}
				}
			}
		}
	}
}

// TestDotMatchesKernels checks the kernels against dots (gonum's DotUnitary on amd64, where the
// kernels run), the order NT keeps without them, bit for bit: whole K and slices of 64; one, two and
// (AVX-512) four rows of A over B's rows as they are; (AVX-512) three rows and one over sixteen rows
// packed by pack16, prefetching the next rows or not; the same over four rows packed by pack4; K of
// one and of many slices.
func TestDotMatchesKernels(t *testing.T) {
	if !available {
		testfiles.SkipCPU(t, "no AVX2: NT sums every output with dot")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, k := range []int{16, 48, 64, 80, 128, 1024, 1040, 2048} {
		for _, slice := range []int{Slice, k} {
			b := values(r, 16*k+16)
			off := (16 - int(uintptr(ptr(b))%16)) % 16 / 4
			b = b[off : off+16*k]
			a := values(r, 4*k)
			c0 := values(r, 4*16)
			p := product{m: 4, k: k, a: a, lda: k, b: b, ldb: k, c: append([]float32(nil), c0...), ldc: 16, slice: slice}
			p.dots(0, 4, 0, 16, b, k)
			check := func(name string, got []float32, rows, cols int) {
				t.Helper()
				for i := range rows {
					for j := range cols {
						if g, w := got[i*16+j], p.c[i*16+j]; math.Float32bits(g) != math.Float32bits(w) {
							t.Fatalf("k %d slice %d: %s c[%d][%d] = %v, dot %v", k, slice, name, i, j, g, w)
						}
					}
				}
			}
			got := append([]float32(nil), c0...)
			kernel2x4(&a[0], k, &b[0], k, &got[0], 16, k, slice)
			check("kernel2x4", got, 2, 4)
			got = append([]float32(nil), c0...)
			kernel1x4(&a[0], &b[0], k, &got[0], k, slice)
			check("kernel1x4", got, 1, 4)
			pb4 := make([]float32, 4*k)
			pack4(&pb4[0], &b[0], k, k)
			for _, next := range []*float32{nil, &a[k]} {
				got = append([]float32(nil), c0...)
				kernel3x4p(&a[0], k, &pb4[0], &got[0], 16, k, slice, next)
				kernel1x4p(&a[3*k], &pb4[0], &got[3*16], k, slice)
				check(fmt.Sprintf("kernel3x4p (next %v) and kernel1x4p", next != nil), got, 4, 4)
			}
			if !available512 {
				continue
			}
			got = append([]float32(nil), c0...)
			kernel4x4z(&a[0], k, &b[0], k, &got[0], 16, k, slice)
			check("kernel4x4z", got, 4, 4)
			pb := make([]float32, 16*k)
			pack16(&pb[0], &b[0], k, k)
			for _, next := range []*float32{nil, &a[k]} {
				got = append([]float32(nil), c0...)
				kernel3x16(&a[0], k, &pb[0], &got[0], 16, k, slice, next)
				kernel1x16(&a[3*k], &pb[0], &got[3*16], k, slice)
				check(fmt.Sprintf("kernel3x16 (next %v) and kernel1x16", next != nil), got, 4, 16)
			}
		}
	}
}

// TestNaNPayloads checks NT against gonum's Sgemm bit for bit with NaNs of different payloads in A,
// B and C: where two NaNs meet (a product, a sum, a slice sum and C), the operand gonum puts first
// gives its payload, and the kernels keep that order — every set of kernels this CPU can run, packed
// rows of B and not, one to four rows of A past the kernels' tiles, columns past whole fours, whole
// K and slices.
func TestNaNPayloads(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testfiles.SkipBuild(t, "gonum's Sgemm sums in this order only on amd64")
	}
	r := rand.New(rand.NewPCG(11, 12))
	nan := func(v []float32) []float32 {
		for i := range v {
			if r.IntN(50) == 0 {
				v[i] = math.Float32frombits(0x7fc00000 | uint32(r.IntN(1<<22)) | uint32(r.IntN(2))<<31)
			}
		}
		return v
	}
	for _, s := range [][4]int{{1, 8, 64, 0}, {2, 8, 48, 0}, {3, 12, 64, 0}, {5, 10, 64, 0}, {7, 16, 1024, 0}, {16, 16, 64, 0},
		{20, 50, 512, 0}, {130, 256, 1024, 0}, {3, 32, 8, 0}, {5, 48, 100, 2}, {20, 50, 512, 1}, {70, 40, 200, 3}} {
		m, n, k := s[0], s[1], s[2]
		a, b, c0 := nan(values(r, m*k)), nan(values(r, n*k+16)), nan(values(r, m*n))
		off := (16-int(uintptr(ptr(b))%16))%16/4 + s[3] // s[3]: B's rows that many values past the boundary
		b = b[off : off+n*k]
		want := append([]float32(nil), c0...)
		gonumNT(m, n, k, a, k, b, k, 1, want, n)
		forKernels(t, func(kernels string) {
			got := append([]float32(nil), c0...)
			NT(m, n, k, a, k, b, k, 1, got, n)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("m %d n %d k %d, %s: c[%d] = %#x, gonum %#x", m, n, k, kernels, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
				}
			}
		})
	}
}

// TestPack16 checks pack16's layout: for each pair of positions, group 0's rows' pairs (rows 0, 1, 4,
// 5, 8, 9, 12, 13), then group 1's (2, 3, 6, 7, 10, 11, 14, 15), from rows ldb apart.
func TestPack16(t *testing.T) {
	if !available512 {
		testfiles.SkipCPU(t, "no AVX-512: pack16 does not run")
	}
	rows := [2][8]int{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}
	r := rand.New(rand.NewPCG(9, 10))
	for _, k := range []int{8, 16, 24, 512} {
		ldb := k + 3
		b := values(r, 15*ldb+k)
		pb := make([]float32, 16*k)
		pack16(&pb[0], &b[0], ldb, k)
		at := 0
		for q := 0; q < k; q += 2 {
			for g := range 2 {
				for _, row := range rows[g] {
					for v := range 2 {
						if w := b[row*ldb+q+v]; math.Float32bits(pb[at]) != math.Float32bits(w) {
							t.Fatalf("k %d: packed value %d = %v, want row %d's value %d, %v", k, at, pb[at], row, q+v, w)
						}
						at++
					}
				}
			}
		}
	}
}

// TestPack4 checks pack4's layout: for each four positions, rows 0 and 2's fours, then rows 1 and 3's,
// from rows ldb apart.
func TestPack4(t *testing.T) {
	if !available {
		testfiles.SkipCPU(t, "no AVX2: pack4 does not run")
	}
	r := rand.New(rand.NewPCG(13, 14))
	for _, k := range []int{8, 16, 24, 512} {
		ldb := k + 3
		b := values(r, 3*ldb+k)
		pb := make([]float32, 4*k)
		pack4(&pb[0], &b[0], ldb, k)
		at := 0
		for q := 0; q < k; q += 4 {
			for _, row := range []int{0, 2, 1, 3} {
				for v := range 4 {
					if w := b[row*ldb+q+v]; math.Float32bits(pb[at]) != math.Float32bits(w) {
						t.Fatalf("k %d: packed value %d = %v, want row %d's value %d, %v", k, at, pb[at], row, q+v, w)
					}
					at++
				}
			}
		}
	}
}

// TestDotMatchesGonum checks dot, the order NT keeps on other architectures, against gonum's amd64
// DotUnitary (a 1×1 Sgemm sums the whole K in one call) bit for bit: every K up to 100 and some longer,
// the second operand 0-3 values past a 16-byte boundary (the values before it go to lane 0 first).
func TestDotMatchesGonum(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testfiles.SkipBuild(t, "gonum's DotUnitary sums in this order only on amd64")
	}
	r := rand.New(rand.NewPCG(7, 8))
	ks := []int{1000, 1023, 2048, 2051}
	for k := range 101 {
		ks = append(ks, k)
	}
	for _, k := range ks {
		for off := range 4 {
			x := values(r, k)
			y := values(r, k+8)
			y = y[(16-int(uintptr(ptr(y))%16))%16/4+off:][:k]
			want := []float32{0}
			gonumNT(1, 1, k, x, max(1, k), y, max(1, k), 0, want, 1)
			if got := 0 + dot(x, y); math.Float32bits(got) != math.Float32bits(want[0]) {
				t.Fatalf("k %d off %d: dot %v, gonum %v", k, off, got, want[0])
			}
		}
	}
}

func TestNTPanics(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"beta 0.5", func() { NT(1, 1, 1, []float32{1}, 1, []float32{1}, 1, 0.5, []float32{0}, 1) }},
		{"short A", func() { NT(2, 1, 2, []float32{1, 2}, 2, []float32{1, 2}, 2, 0, []float32{0, 0}, 1) }},
		{"lda below k", func() { NT(1, 1, 2, []float32{1, 2}, 1, []float32{1, 2}, 2, 0, []float32{0}, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			tc.f()
		})
	}
}

// BenchmarkNT multiplies the shapes of an 8B MoE's screen (128 tokens through a 2048-wide weight; 16
// tokens routed to an expert of 1792 rows) and a 27B layer's FFN by gonum's Sgemm and by NT with each
// set of kernels this CPU can run, interleaved in every iteration, and reports each rate and its ratio
// to gonum's.
func BenchmarkNT(b *testing.B) {
	for _, s := range [][3]int{{128, 2048, 2048}, {16, 1792, 2048}, {16, 2048, 1792}, {128, 17408, 5120}, {1, 2048, 2048}} {
		m, n, k := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("%dx%dx%d", m, n, k), func(bb *testing.B) {
			r := rand.New(rand.NewPCG(5, 6))
			a, w, c := values(r, m*k), values(r, n*k), make([]float32, m*n)
			var sets []string
			forKernels(bb, func(name string) { sets = append(sets, name) })
			el := make([]float64, len(sets)+1)
			it := 0
			for bb.Loop() {
				for j := range el {
					i := (it + j) % len(el)
					if i == 0 {
						el[0] += timeIt(func() { gonumNT(m, n, k, a, k, w, k, 0, c, n) })
						continue
					}
					forKernels(bb, func(name string) {
						if name == sets[i-1] {
							el[i] += timeIt(func() { NT(m, n, k, a, k, w, k, 0, c, n) })
						}
					})
				}
				it++
			}
			flop := 2 * float64(m) * float64(n) * float64(k) * float64(it)
			bb.ReportMetric(flop/el[0]/1e9, "gonum-GFLOP/s")
			for i, name := range sets {
				bb.ReportMetric(flop/el[i+1]/1e9, name+"-GFLOP/s")
				bb.ReportMetric(el[0]/el[i+1], name+"-x-gonum")
			}
		})
	}
}
