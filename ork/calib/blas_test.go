//go:build blas

package calib

// Built with -tags blas, this package's tests link ork/quant, which puts gonum's BLAS on OpenBLAS, so
// they exercise the dsyrk accumulation (TestAccumulateMatchesNaive, TestSharedBatch) and OpenBLAS's
// sgemm in the forward passes.
import (
	"testing"

	"gonum.org/v1/gonum/blas/blas64"

	_ "orkpipe/ork/quant"
)

func TestBLASBackend(t *testing.T) {
	if pureGoBLAS() {
		t.Fatalf("-tags blas: blas64 runs %T, want OpenBLAS", blas64.Implementation())
	}
}
