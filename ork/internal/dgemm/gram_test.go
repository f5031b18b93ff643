package dgemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// TestGramUpperMatchesGonum compares GramUpper with gonum's Dsyrk(Upper, Trans, 1, X, 1, C) bit for
// bit over the whole of C: the upper triangle's sums (signed zeros, infinities and NaNs included),
// and the strict lower triangle and the padding beyond each row untouched (NaNs of their own payload,
// which a read-and-write-back would also keep, are checked with the rest; a kernel writing a tile's
// values below the diagonal fails). Widths on and off whole tiles of 8 and 16 columns (the columns
// beyond the last whole 16 in place, the rows below them in Go), several bands and column blocks,
// more tokens than a pass as it ships and as 40 (a zero in one pass and not in the next), X with
// zeros throughout, with none and with one, scratch nil, short and exact, one and three goroutines,
// every path the CPU can take.
func TestGramUpperMatchesGonum(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	shapes := []struct{ n, t, pad int }{
		{1, 1, 0}, {7, 3, 1}, {8, 5, 0}, {16, 9, 0}, {17, 40, 2}, {40, 33, 0}, {172, 64, 3}, {264, 700, 1}, {300, 130, 0},
	}
	for _, sh := range shapes {
		ldx, ldc := sh.n+sh.pad, sh.n+2*sh.pad
		zs := fill(r, (sh.t-1)*ldx+sh.n, sh.n%2 == 1)
		c0 := fill(r, (sh.n-1)*ldc+sh.n, false)
		for i := range sh.n {
			for j := range ldc {
				if j < i || j >= sh.n {
					if idx := i*ldc + j; idx < len(c0) {
						c0[idx] = math.Float64frombits(0x7ff4000000000000 | uint64(idx)) // a signalling NaN's payload
					}
				}
			}
		}
		for xz, x := range [][]float64{zs, noZeros(zs, -1), noZeros(zs, len(zs)/2)} {
			want := append([]float64(nil), c0...)
			gonum.Implementation{}.Dsyrk(blas.Upper, blas.Trans, sh.n, sh.t, 1, x, ldx, 1, want, ldc)
			forPaths(t, func(path string) {
				for _, procs := range []int{1, 3} {
					for _, pk := range []int{packK, 40} {
						for _, sc := range []int{0, GramScratch(sh.n, sh.t) / 2, GramScratch(sh.n, sh.t)} {
							got := append([]float64(nil), c0...)
							prev := runtime.GOMAXPROCS(procs)
							ship := packK
							packK = pk
							GramUpper(sh.n, sh.t, x, ldx, got, ldc, make([]float64, sc))
							packK = ship
							runtime.GOMAXPROCS(prev)
							for i := range want {
								if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
									t.Fatalf("%+v X %d, %s, %d procs, pass %d, scratch %d: c[%d] (row %d, column %d) = %v (%#x), gonum %v (%#x)",
										sh, xz, path, procs, pk, sc, i, i/ldc, i%ldc, got[i], math.Float64bits(got[i]), want[i], math.Float64bits(want[i]))
								}
							}
						}
					}
				}
			})
		}
	}
}

// TestGramUpperRejects checks GramUpper's argument checks: negative sizes, strides narrower than a
// row, and operands too short panic; no rows or no tokens do nothing.
func TestGramUpperRejects(t *testing.T) {
	for _, tc := range []struct {
		name         string
		n, t, ld, lc int
		x, c         int
	}{
		{"negative n", -1, 1, 1, 1, 1, 1}, {"negative t", 1, -1, 1, 1, 1, 1}, {"ldx", 4, 2, 3, 4, 8, 16},
		{"ldc", 4, 2, 4, 3, 8, 16}, {"short x", 4, 2, 4, 4, 7, 16}, {"short c", 4, 2, 4, 4, 8, 15},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tc.name)
				}
			}()
			GramUpper(tc.n, tc.t, make([]float64, tc.x), tc.ld, make([]float64, tc.c), tc.lc, nil)
		}()
	}
	c := []float64{1, 2, 3, 4}
	GramUpper(0, 3, nil, 1, nil, 1, nil)
	GramUpper(2, 0, nil, 2, c, 2, nil)
	if c[0] != 1 || c[3] != 4 {
		t.Errorf("no tokens changed C: %v", c)
	}
}

// BenchmarkGramUpper times one update of a Hessian of the 27B's widths (512 rows of X into the upper
// triangle of a K × K matrix: 5120, the attention and FFN inputs; 17408, ffn_down's, whose triangle
// alone is 1.2 GB of a 2.4 GB matrix) by GramUpper and by the stripes of Dgemm calibration ran before
// it (256 rows of C a call, the diagonal block whole), interleaved in every iteration; metrics: ms per
// update of each, GFLOP/s (K·(K+1)·512) and the stripes' time over GramUpper's.
func BenchmarkGramUpper(b *testing.B) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, k := range []int{5120, 17408} {
		b.Run(fmt.Sprintf("K%d", k), func(b *testing.B) {
			const t = 512
			x := make([]float64, t*k)
			for i := range x {
				x[i] = r.NormFloat64()
			}
			c := make([]float64, k*k)
			for i := range c {
				c[i] = 1 // faulted in before the clock starts
			}
			scratch := make([]float64, GramScratch(k, t))
			stripes := func() {
				for r0 := 0; r0 < k; r0 += gramRows {
					r1 := min(r0+gramRows, k)
					Implementation{}.Dgemm(blas.Trans, blas.NoTrans, r1-r0, k-r0, t, 1, x[r0:], k, x[r0:], k, 1, c[r0*k+r0:], k)
				}
			}
			paths := [2]func(){stripes, func() { GramUpper(k, t, x, k, c, k, scratch) }}
			var el [2]time.Duration
			it := 0
			for b.Loop() {
				for j := range 2 {
					i := (it + j) % 2
					start := time.Now()
					paths[i]()
					el[i] += time.Since(start)
				}
				it++
			}
			flops := float64(k) * float64(k+1) * t * float64(it)
			b.ReportMetric(el[0].Seconds()*1e3/float64(it), "stripes-ms")
			b.ReportMetric(el[1].Seconds()*1e3/float64(it), "gram-ms")
			b.ReportMetric(flops/el[1].Seconds()/1e9, "gram-GFLOP/s")
			b.ReportMetric(el[0].Seconds()/el[1].Seconds(), "gram-x-stripes")
		})
	}
}

// TestNextTile checks that nextTile names, for each tile item runs, the tile it runs next (and none
// after the last): items left of, across and right of the diagonal, partial bands and blocks.
func TestNextTile(t *testing.T) {
	for _, it := range [][4]int{{0, 256, 0, 128}, {0, 256, 128, 256}, {256, 512, 256, 384}, {256, 512, 384, 512},
		{0, 64, 0, 32}, {8, 40, 16, 48}, {512, 768, 512, 528}, {0, 16, 0, 16}} {
		r0, r1, c0, c1 := it[0], it[1], it[2], it[3]
		var tiles [][2]int
		for i := r0; i < r1; i += 8 {
			for j := max(c0, i&^15); j < c1; j += 16 {
				tiles = append(tiles, [2]int{i, j})
			}
		}
		for n, tl := range tiles {
			ni, nj := nextTile(tl[0], tl[1], r1, c0, c1)
			want := [2]int{r1, 0}
			if n+1 < len(tiles) {
				want = tiles[n+1]
			}
			if ni != want[0] || (ni < r1 && nj != want[1]) {
				t.Fatalf("item %v: after tile %v nextTile gives (%d, %d), want %v", it, tl, ni, nj, want)
			}
		}
	}
}
