package quant

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/lapack"
	"gonum.org/v1/gonum/lapack/gonum"
)

// upperWithGarbage returns a k x k row-major matrix of values of both signs and many magnitudes in
// the upper triangle and NaNs below it (which neither normUpper nor firstNaNUpper may read).
func upperWithGarbage(k int, seed uint64) []float64 {
	g := newRNG(seed)
	a := make([]float64, k*k)
	for i := range k {
		for j := range k {
			if j < i {
				a[i*k+j] = math.NaN()
				continue
			}
			v := float64(int64(g.next()%2001)-1000) / 7
			a[i*k+j] = v * math.Pow(10, float64(int(g.next()%9))-4)
		}
	}
	return a
}

// TestNormUpperMatchesGonum: normUpper is gonum's Dlansy(MaxRowSum, Upper) bit for bit, on one
// goroutine and on several, whatever the lower triangle holds; a NaN in the upper triangle gives
// NaN, an Inf gives Inf.
func TestNormUpperMatchesGonum(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, k := range []int{1, 2, 3, 17, 64, 65, 300} {
		a := upperWithGarbage(k, uint64(k))
		want := gonum.Implementation{}.Dlansy(lapack.MaxRowSum, blas.Upper, k, a, k, make([]float64, k))
		for _, procs := range []int{1, 2, 3, 5} {
			runtime.GOMAXPROCS(procs)
			if got := normUpper(a, k); math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("K %d, %d procs: %v (%#x), gonum %v (%#x)", k, procs, got, math.Float64bits(got), want, math.Float64bits(want))
			}
		}
	}
	const k = 40
	for _, c := range []struct {
		at   int
		v    float64
		want float64
	}{{3*k + 30, math.NaN(), math.NaN()}, {39*k + 39, math.Inf(-1), math.Inf(1)}} {
		a := upperWithGarbage(k, 9)
		a[c.at] = c.v
		runtime.GOMAXPROCS(2)
		got := normUpper(a, k)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%v at (%d,%d): %v, want %v", c.v, c.at/k, c.at%k, got, c.want)
		}
	}
}

// TestFirstNaNUpper: the first NaN of the upper triangle in row order, whichever band finds one first
// (a NaN in a later band only, and one in an earlier band too), on one goroutine and on several;
// NaNs below the diagonal do not count.
func TestFirstNaNUpper(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	const k = 300
	for _, procs := range []int{1, 2, 3} {
		runtime.GOMAXPROCS(procs)
		a := upperWithGarbage(k, 5)
		if i, j, ok := firstNaNUpper(a, k); ok {
			t.Fatalf("%d procs: no NaN above the diagonal, found (%d,%d)", procs, i, j)
		}
		for _, c := range []struct {
			nans   [][2]int
			wi, wj int
		}{
			{[][2]int{{250, 299}}, 250, 299},               // the last band alone
			{[][2]int{{70, 70}}, 70, 70},                   // a diagonal value alone
			{[][2]int{{250, 299}, {70, 70}}, 70, 70},       // an earlier band too
			{[][2]int{{3, 299}, {3, 4}, {200, 200}}, 3, 4}, // two in one row
		} {
			b := append([]float64(nil), a...)
			for _, n := range c.nans {
				b[n[0]*k+n[1]] = math.NaN()
			}
			if i, j, ok := firstNaNUpper(b, k); !ok || i != c.wi || j != c.wj {
				t.Fatalf("%d procs, NaNs at %v: (%d,%d) %v, want (%d,%d)", procs, c.nans, i, j, ok, c.wi, c.wj)
			}
		}
	}
}
