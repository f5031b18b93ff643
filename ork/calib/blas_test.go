//go:build blas

package calib

// Built with -tags blas, this package's tests link ork/quant, which puts gonum's BLAS on OpenBLAS, so
// they exercise the dsyrk accumulation (TestAccumulateMatchesNaive, TestSharedBatch), OpenBLAS's sgemm
// in the forward passes and model.Encoded's pipelined Apply.
import (
	"math"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas/blas64"

	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
	"orkpipe/ork/quant"
)

func TestBLASBackend(t *testing.T) {
	if pureGoBLAS() {
		t.Fatalf("-tags blas: blas64 runs %T, want OpenBLAS", blas64.Implementation())
	}
}

// TestEncodedPipelinedMatchesDense: under OpenBLAS an encoded weight's Apply (model.Encoded's pipelined
// path: one block dequantized while the previous one is multiplied) equals the float32 Dense of the
// dequantized weight to float32 rounding, for weights of one block and of several, and token counts
// from 1 to a chunk; and inside a quant.SingleThreadedBLAS scope (the calibrate node's: the panels on Go
// workers) the encoded weight and the Dense give the same bits, with one worker as with two.
func TestEncodedPipelinedMatchesDense(t *testing.T) {
	for _, s := range []struct{ n, k int }{{96, 64}, {1000, 5120}, {700, 17408}, {5120, 1024}} {
		w := make([]float32, s.n*s.k)
		for i := range w {
			w[i] = float32(math.Sin(float64(i)*0.37)) * 0.05
		}
		raw := make([]byte, s.n*s.k/32*34)
		if err := gguf.Quantize(gguf.TypeQ8_0, w, raw); err != nil {
			t.Fatal(err)
		}
		e, err := model.NewEncoded(gguf.TypeQ8_0, s.n, s.k, raw)
		if err != nil {
			t.Fatal(err)
		}
		dq := make([]float32, len(w))
		if err := gguf.Dequantize(gguf.TypeQ8_0, raw, dq); err != nil {
			t.Fatal(err)
		}
		d, _ := model.NewDense(s.n, s.k, dq, nil)
		abs := make([]float32, len(dq))
		for i, v := range dq {
			abs[i] = float32(math.Abs(float64(v)))
		}
		da, _ := model.NewDense(s.n, s.k, abs, nil)
		for _, rows := range []int{1, 37, 512} {
			x := make([]float32, rows*s.k)
			xa := make([]float32, rows*s.k)
			for i := range x {
				x[i] = float32(math.Cos(float64(i) * 0.11))
				xa[i] = float32(math.Abs(float64(x[i])))
			}
			ye, yd, ya := make([]float32, rows*s.n), make([]float32, rows*s.n), make([]float32, rows*s.n)
			ye1, yd1 := make([]float32, rows*s.n), make([]float32, rows*s.n)
			for _, a := range []struct {
				l      model.Linear
				y, x   []float32
				single bool
			}{{e, ye, x, false}, {d, yd, x, false}, {da, ya, xa, false}, {e, ye1, x, true}, {d, yd1, x, true}} {
				if err := applyIn(a.single, a.l, a.y, a.x); err != nil {
					t.Fatal(err)
				}
			}
			ye2 := make([]float32, rows*s.n)
			prev := runtime.GOMAXPROCS(1)
			err := applyIn(true, e, ye2, x)
			runtime.GOMAXPROCS(prev)
			if err != nil {
				t.Fatal(err)
			}
			for i := range ye {
				if math.Float32bits(ye1[i]) != math.Float32bits(yd1[i]) || math.Float32bits(ye2[i]) != math.Float32bits(yd1[i]) {
					t.Fatalf("%dx%d, %d tokens, output %d: single-threaded scope: encoded %g (one worker: %g), dense %g",
						s.n, s.k, rows, i, ye1[i], ye2[i], yd1[i])
				}
				if diff := math.Abs(float64(ye1[i] - yd[i])); diff > 1e-6*float64(ya[i]) {
					t.Fatalf("%dx%d, %d tokens, output %d: single-threaded scope %g and dense %g differ by %.3g, Σ|w·x| = %.3g", s.n, s.k, rows, i, ye1[i], yd[i], diff, ya[i])
				}
			}
			// Float32 sums in two orders differ by a few ulps of Σ|w·x|, not of |y|.
			for i := range yd {
				if diff := math.Abs(float64(ye[i] - yd[i])); diff > 1e-6*float64(ya[i]) {
					t.Fatalf("%dx%d, %d tokens, output %d: encoded %g and dense %g differ by %.3g, Σ|w·x| = %.3g", s.n, s.k, rows, i, ye[i], yd[i], diff, ya[i])
				}
			}
		}
	}
}

// applyIn runs l.Apply inside a quant.SingleThreadedBLAS scope when single is set.
func applyIn(single bool, l model.Linear, y, x []float32) error {
	if single {
		defer quant.SingleThreadedBLAS()()
	}
	return l.Apply(y, x)
}

// TestSingleThreadedUpdate: the Hessian update inside a quant.SingleThreadedBLAS scope (tiles of
// serialTile on Go workers, each call on one OpenBLAS thread) gives the same bits with one worker as with
// two, and agrees with the update outside it (tiles of blasTile on OpenBLAS's threads) to float64
// rounding, for widths of one tile, of several with a narrow last one, and past blasTile, and batches of
// 1 to 512 rows.
func TestSingleThreadedUpdate(t *testing.T) {
	for _, k := range []int{100, 2500, blasTile + 300} {
		for _, rows := range []int{1, 37, 512} {
			x := make([]float64, rows*k)
			var maxX float64
			for i := range x {
				x[i] = math.Sin(float64(i)*0.173) + 0.01*float64(i%7)
				maxX = max(maxX, math.Abs(x[i]))
			}
			var c [3][]float64
			for i, procs := range []int{0, 1, 2} { // 0: outside the scope
				c[i] = make([]float64, k*k)
				func() {
					if procs > 0 {
						defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
						defer quant.SingleThreadedBLAS()()
					}
					syrkUpper(c[i], k, x, rows, nil)
					syrkUpper(c[i], k, x, rows, nil) // onto a triangle already holding a batch
				}()
			}
			for r := range k {
				for j := r; j < k; j++ {
					i := r*k + j
					if math.Float64bits(c[1][i]) != math.Float64bits(c[2][i]) {
						t.Fatalf("K %d, %d rows: H[%d][%d] = %v with one worker, %v with two", k, rows, r, j, c[1][i], c[2][i])
					}
					// Both sum 2·rows products of at most maxX² each in float64.
					if diff := math.Abs(c[1][i] - c[0][i]); diff > 1e-14*2*float64(rows)*maxX*maxX {
						t.Fatalf("K %d, %d rows: H[%d][%d] = %v in the single-threaded scope, %v outside it", k, rows, r, j, c[1][i], c[0][i])
					}
				}
			}
		}
	}
}
