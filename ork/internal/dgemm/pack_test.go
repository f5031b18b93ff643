package dgemm

import (
	"math"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"orkpipe/internal/testfiles"
)

// TestPackedSkipsAsGonum checks the packed path's choice of kernel per row tile and pass: B is all
// infinities, so a product gonum skips (a zero tmp) and the kernel does not would turn C's value into
// a NaN. A holds one value that makes tmp zero — a ±0 for alpha ±1, a small value for alpha the
// smallest subnormal (tmp underflows) — at a tile's first and last rows and at every token in turn
// (every pass of packK tokens, its first and last; with -short only each pass's first and last two),
// for A and Aᵀ, A packed whole and 8 rows at a time, on one goroutine and on three, on each kernel
// path (AVX2's 4×8 tiles: the halves' first and last rows too).
func TestPackedSkipsAsGonum(t *testing.T) {
	if !has4x8 {
		testfiles.SkipCPU(t, "the packed path needs AVX2")
	}
	forPaths(t, func(path string) { testPackedSkips(t, path) })
}

func testPackedSkips(t *testing.T, path string) {
	defer func(k, aMax int) { packK, packAMax = k, aMax }(packK, packAMax)
	packK = 24
	const m, n, k = 20, 33, 80 // two whole row tiles and 4 rows; four passes, the last short
	b := make([]float64, k*n)
	for i := range b {
		b[i] = math.Inf(1)
	}
	// The tokens the zero is put at: every one; with -short (the AVX2 host's run under emulation,
	// internal/avx2host, where the full loop takes minutes) each pass's first two and last two.
	var tokens []int
	for l := range k {
		if p := l % packK; !testing.Short() || p < 2 || p >= packK-2 || l >= k-2 {
			tokens = append(tokens, l)
		}
	}
	for _, tA := range []blas.Transpose{blas.NoTrans, blas.Trans} {
		for _, alpha := range []float64{1, -1, math.SmallestNonzeroFloat64} {
			for _, aMax := range []int{1 << 21, 8 * k} {
				packAMax = aMax
				for _, i := range []int{0, 3, 4, 7, 8, 11, 12, 15, 17, 19} { // tiles' and halves' first and last rows, the rows beyond
					for _, l := range tokens {
						a := make([]float64, m*k)
						for x := range a {
							a[x] = 1 + float64(x%5)
						}
						at := i*k + l
						lda := k
						if tA == blas.Trans {
							at, lda = l*m+i, m
						}
						a[at] = math.Copysign(0, float64(l%2*2-1))
						if alpha != 1 && alpha != -1 {
							a[at] = 0.25 // alpha·a rounds to zero; alpha times every other value does not
						}
						want := make([]float64, m*n)
						gonum.Implementation{}.Dgemm(tA, blas.NoTrans, m, n, k, alpha, a, lda, b, n, 1, want, n)
						for _, procs := range []int{1, 3} {
							got := make([]float64, m*n)
							prev := runtime.GOMAXPROCS(procs)
							Implementation{}.Dgemm(tA, blas.NoTrans, m, n, k, alpha, a, lda, b, n, 1, got, n)
							runtime.GOMAXPROCS(prev)
							for x := range want {
								if math.Float64bits(got[x]) != math.Float64bits(want[x]) {
									t.Fatalf("%s: %v alpha %v, A packed %d values at a time, %d procs, tmp zero at row %d token %d: c[%d] = %v, gonum %v",
										path, tA, alpha, aMax, procs, i, l, x, got[x], want[x])
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestBufReuseAcrossSizes runs the pattern of the factorisation's products on bufs: A's chunk taken,
// a work item's smaller block of B taken and returned inside it, then A's chunk returned, product
// after product, A's chunk growing a little each time (as the triangular inverse's panels grow, and as
// chunks differ with the products' shapes). The pools must hand each request a buffer back rather
// than allocate: with one pool for every size, each product was handed the previous, smaller chunk,
// dropped it and allocated a new one. (A collection during the loop may empty the pools once or twice,
// hence the allowance; under -race sync.Pool drops buffers at random, so the test does not run there.)
func TestBufReuseAcrossSizes(t *testing.T) {
	if raceEnabled {
		testfiles.SkipBuild(t, "sync.Pool drops a random share of its buffers under -race")
	}
	small, rounds := 512*blockCols, 64
	product := func(big int) {
		a := getBuf(big)
		b := getBuf(small)
		if len(*a) != big || len(*b) != small {
			t.Fatalf("getBuf lengths %d, %d; want %d, %d", len(*a), len(*b), big, small)
		}
		(*a)[big-1], (*b)[small-1] = 1, 2 // the whole length is usable
		putBuf(b)
		putBuf(a)
	}
	big := func(i int) int { return packAMax/2 + 1 + i*(packAMax/2/(rounds+1)) } // all in packAMax's class
	product(big(0))                                                              // the pools' first buffers
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range rounds {
		product(big(i + 1))
	}
	runtime.ReadMemStats(&after)
	if got, allowed := after.TotalAlloc-before.TotalAlloc, uint64(3*(packAMax+small)*8); got > allowed {
		t.Errorf("%d products allocated %d bytes (%.1f chunks of A of %d MiB); want at most %d: the pools do not reuse their buffers",
			rounds, got, float64(got)/float64(packAMax*8), packAMax*8>>20, allowed)
	}
}

// TestBufClass checks the size classes: a request gets a buffer of its length whose capacity is
// the smallest power of two holding it, and a returned buffer goes back to that class.
func TestBufClass(t *testing.T) {
	for _, tc := range []struct{ n, class int }{{0, 0}, {1, 0}, {2, 1}, {3, 2}, {4, 2}, {5, 3}, {65536, 16}, {65537, 17}, {packAMax, 21}, {17408 * 64, 21}} {
		if got := bufClass(tc.n); got != tc.class {
			t.Errorf("bufClass(%d) = %d, want %d", tc.n, got, tc.class)
		}
		v := getBuf(tc.n)
		if len(*v) != tc.n || cap(*v) != 1<<tc.class {
			t.Errorf("getBuf(%d): len %d cap %d, want len %d cap %d", tc.n, len(*v), cap(*v), tc.n, 1<<tc.class)
		}
		putBuf(v)
	}
}
