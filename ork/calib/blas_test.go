//go:build blas

package calib

// Built with -tags blas, this package's tests link ork/quant, which puts gonum's BLAS on OpenBLAS, so
// they exercise the dsyrk accumulation (TestAccumulateMatchesNaive, TestSharedBatch), OpenBLAS's sgemm
// in the forward passes and model.Encoded's pipelined Apply.
import (
	"math"
	"testing"

	"gonum.org/v1/gonum/blas/blas64"

	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
	_ "orkpipe/ork/quant"
)

func TestBLASBackend(t *testing.T) {
	if pureGoBLAS() {
		t.Fatalf("-tags blas: blas64 runs %T, want OpenBLAS", blas64.Implementation())
	}
}

// TestEncodedPipelinedMatchesDense: under OpenBLAS an encoded weight's Apply (model.Encoded's pipelined
// path: one block dequantized while the previous one is multiplied) equals the float32 Dense of the
// dequantized weight to float32 rounding, for weights of one block and of several, and token counts
// from 1 to a chunk.
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
			for _, a := range []struct {
				l    model.Linear
				y, x []float32
			}{{e, ye, x}, {d, yd, x}, {da, ya, xa}} {
				if err := a.l.Apply(a.y, a.x); err != nil {
					t.Fatal(err)
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
