package quant

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"gonum.org/v1/gonum/blas"
	gonumlapack "gonum.org/v1/gonum/lapack/gonum"
	"gonum.org/v1/gonum/mat"

	"orkpipe/internal/testfiles"
)

// randSPD returns a row-major n x n symmetric positive definite matrix XᵀX/m + 0.01·I from m = 2n
// random rows, like a damped Hessian.
func randSPD(n int, seed uint64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 99))
	m := 2 * n
	x := mat.NewDense(m, n, nil)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			x.Set(i, j, rng.NormFloat64())
		}
	}
	var h mat.Dense
	h.Mul(x.T(), x)
	h.Scale(1/float64(m), &h)
	for i := 0; i < n; i++ {
		h.Set(i, i, h.At(i, i)+0.01)
	}
	return append([]float64(nil), h.RawMatrix().Data...)
}

// invCholOracle is the textbook route to the upper Cholesky factor of H⁻¹ (the 4/3·K³ one GPTQ
// took before the reflection): Cholesky of H, its inverse, Cholesky of the inverse (gonum/mat).
func invCholOracle(t *testing.T, h []float64, n int) []float64 {
	t.Helper()
	var ch mat.Cholesky
	if !ch.Factorize(mat.NewSymDense(n, append([]float64(nil), h...))) {
		t.Fatal("oracle: H not positive definite")
	}
	var inv mat.SymDense
	if err := ch.InverseTo(&inv); err != nil {
		t.Fatal(err)
	}
	var ci mat.Cholesky
	if !ci.Factorize(&inv) {
		t.Fatal("oracle: H⁻¹ not positive definite")
	}
	var u mat.TriDense
	ci.UTo(&u)
	out := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			out[i*n+j] = u.At(i, j)
		}
	}
	return out
}

// TestInvCholUpperMatchesTextbook: the reflected route (one Cholesky, one triangular inverse)
// gives the upper Cholesky factor of H⁻¹ that Cholesky, inverse, Cholesky gives, to rounding, with
// UᵀU·H = I, on sizes around the 64-wide blocks (odd ones too), with both the pure-Go steps and
// this build's (OpenBLAS's LAPACK under -tags blas); the strict lower triangle keeps H.
func TestInvCholUpperMatchesTextbook(t *testing.T) {
	backends := []struct {
		name  string
		steps factorSteps
	}{{"gonum", gonumSteps}, {"build's " + BLASBackend, steps}}
	for _, b := range backends {
		name, st := b.name, b.steps
		for _, n := range []int{1, 2, 3, 7, 63, 64, 65, 128, 129, 191, 300} {
			h := randSPD(n, uint64(n))
			want := invCholOracle(t, h, n)
			a := append([]float64(nil), h...)
			saved := steps
			steps = st
			err := invCholUpper(context.Background(), a, n)
			steps = saved
			if err != nil {
				t.Fatalf("%s n=%d: %v", name, n, err)
			}
			maxU, maxD := 0.0, 0.0
			for i := 0; i < n; i++ {
				for j := 0; j < n; j++ {
					if j < i {
						if a[i*n+j] != h[i*n+j] {
							t.Fatalf("%s n=%d: strict lower (%d,%d) = %g, want H's %g", name, n, i, j, a[i*n+j], h[i*n+j])
						}
						continue
					}
					maxU = max(maxU, math.Abs(want[i*n+j]))
					maxD = max(maxD, math.Abs(a[i*n+j]-want[i*n+j]))
				}
			}
			if rel := maxD / maxU; rel > 1e-11 {
				t.Errorf("%s n=%d: max |U - U_textbook| / max |U| = %.3g, want rounding (<= 1e-11)", name, n, rel)
			}
			// UᵀU·H = I
			u := mat.NewDense(n, n, nil)
			for i := 0; i < n; i++ {
				for j := i; j < n; j++ {
					u.Set(i, j, a[i*n+j])
				}
			}
			var uu, p mat.Dense
			uu.Mul(u.T(), u)
			p.Mul(&uu, mat.NewDense(n, n, h))
			worst := 0.0
			for i := 0; i < n; i++ {
				for j := 0; j < n; j++ {
					d := p.At(i, j)
					if i == j {
						d--
					}
					worst = max(worst, math.Abs(d))
				}
			}
			t.Logf("%s n=%d: relative difference to the textbook route %.3g, max |UᵀU·H - I| %.3g", name, n, maxD/maxU, worst)
			if worst > 1e-9 {
				t.Errorf("%s n=%d: max |UᵀU·H - I| = %.3g, want <= 1e-9", name, n, worst)
			}
		}
	}
}

// TestReflectUpper: the reflection maps (i, j) to (n-1-j, n-1-i) in the upper triangle, twice is
// the identity, and the strict lower triangle is never touched (sizes below, at and above the
// tile and the parallel threshold).
func TestReflectUpper(t *testing.T) {
	for _, n := range []int{0, 1, 2, 5, 64, 65, 130, 257, 600} {
		a := make([]float64, n*n)
		for i := range a {
			a[i] = float64(i)
		}
		reflectUpper(a, n)
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				want := float64(i*n + j)
				if j >= i {
					want = float64((n-1-j)*n + n - 1 - i)
				}
				if a[i*n+j] != want {
					t.Fatalf("n=%d: (%d,%d) = %g, want %g", n, i, j, a[i*n+j], want)
				}
			}
		}
		reflectUpper(a, n)
		for i := range a {
			if a[i] != float64(i) {
				t.Fatalf("n=%d: twice reflected, element %d = %g", n, i, a[i])
			}
		}
	}
}

// BenchmarkInvCholUpper8192 times GPTQ's factorisation step alone (invCholUpper: reflect, Cholesky,
// condition estimate, triangular inverse, reflect back) on an 8192 x 8192 diagonally dominant
// symmetric matrix; GFLOP/s counts the 2/3·K³ flops of the Cholesky and the inverse.
func BenchmarkInvCholUpper8192(b *testing.B) {
	const n = 8192
	rng := rand.New(rand.NewPCG(8, 192))
	h := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			v := rng.Float64() - 0.5
			h[i*n+j], h[j*n+i] = v, v
		}
		h[i*n+i] += n
	}
	a := make([]float64, n*n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		copy(a, h)
		b.StartTimer()
		if err := invCholUpper(context.Background(), a, n); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(sec, "s/factor")
	b.ReportMetric(2.0/3*n*n*n/sec/1e9, "GFLOP/s")
}

// TestGPTQTakesTurnsOnTheCores: a GPTQ waits for the cores another GPTQ phase holds, gives up with
// ctx's error when cancelled meanwhile, and gives the cores back when it returns; two GPTQs at once
// give what each gives alone.
func TestGPTQTakesTurnsOnTheCores(t *testing.T) {
	w := randMatrix("blk.0.ffn_down.weight", 16, 96, 7)
	acts := randMatrix("acts", 200, 96, 8)
	h := NewHessian(96)
	if err := h.Add(acts.Data, acts.Rows); err != nil {
		t.Fatal(err)
	}
	release, err := holdCores(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := GPTQ(ctx, w, h, WithWorkers(2))
		done <- err
	}()
	select { // a GPTQ that does not wait returns in a few ms here
	case err := <-done:
		t.Fatalf("GPTQ ran while the cores were held: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), w.Name) {
		t.Fatalf("GPTQ waiting for the cores, cancelled: %v, want context.Canceled naming the weight", err)
	}
	release()

	alone, err := GPTQ(context.Background(), w, h, WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case coresToken <- struct{}{}:
		<-coresToken
	default:
		t.Fatal("GPTQ returned holding the cores")
	}
	var g errgroup.Group
	both := make([]*Weight, 2)
	for i := range both {
		g.Go(func() (err error) {
			both[i], err = GPTQ(context.Background(), w, h, WithWorkers(2))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for i, q := range both {
		if !slices.Equal(q.Codes, alone.Codes) || !slices.Equal(q.Scales, alone.Scales) {
			t.Errorf("concurrent GPTQ %d differs from the one run alone", i)
		}
	}
}

// TestPotrfTrtriMatchGonum: potrfUpper (which takes fusedPanels blocks' updates from the rows above
// together) and trtriUpper give gonum's Dpotrf(Upper) and Dtrtri(Upper, NonUnit) bit for bit over
// the whole matrix (the strict lower triangle, NaN-boxed, untouched), on sizes below, at and around
// one block, one super panel and several (odd ones too), for a dense matrix and a banded one (whose
// factor holds exact zeros: the kernels' skips). gonum's routines run on this build's BLAS, which in
// the pure-Go build gives gonum's own bits (ork/internal/dgemm's tests); under -tags blas OpenBLAS
// sums in another order and these steps are not used (lapackSteps), so the test skips there.
func TestPotrfTrtriMatchGonum(t *testing.T) {
	if BLASBackend != "gonum" {
		testfiles.SkipBuild(t, "BLAS backend %s: potrfUpper and trtriUpper are the pure-Go build's steps", BLASBackend)
	}
	box := math.Float64frombits(0x7ff8_dead_beef_0001) // a NaN payload arithmetic never makes
	same := func(t *testing.T, what string, got, want []float64, n int) {
		t.Helper()
		for i := range got {
			if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
				t.Fatalf("%s: (%d,%d) = %v (%#x), gonum %v (%#x)", what, i/n, i%n, got[i], math.Float64bits(got[i]), want[i], math.Float64bits(want[i]))
			}
		}
	}
	sizes := []int{1, 63, 64, 65, 200, 256, 257, 300, 4*64*2 + 1, 1000, 4*64*3 + 64 + 7}
	if testing.Short() {
		sizes = []int{65, 257, 1000}
	}
	for _, band := range []int{0, 90} {
		for _, n := range sizes {
			t.Run(fmt.Sprintf("n%d/band%d", n, band), func(t *testing.T) {
				h := randSPD(n, uint64(n))
				for i := range n {
					for j := range n {
						if j < i {
							h[i*n+j] = box
						} else if band > 0 && j-i > band {
							h[i*n+j] = 0
						}
					}
				}
				got, want := slices.Clone(h), slices.Clone(h)
				ok, err := potrfUpper(context.Background(), got, n)
				if err != nil || !ok {
					t.Fatalf("potrfUpper: %v, %v", ok, err)
				}
				if !(gonumlapack.Implementation{}).Dpotrf(blas.Upper, n, want, n) {
					t.Fatal("gonum's Dpotrf: not positive definite")
				}
				same(t, "potrf", got, want, n)
				ok, err = trtriUpper(context.Background(), got, n)
				if err != nil || !ok {
					t.Fatalf("trtriUpper: %v, %v", ok, err)
				}
				if !(gonumlapack.Implementation{}).Dtrtri(blas.Upper, blas.NonUnit, n, want, n) {
					t.Fatal("gonum's Dtrtri: singular")
				}
				same(t, "trtri", got, want, n)
			})
		}
	}
}
