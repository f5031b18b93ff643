package quant

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// TestHessianValidateFirstInRowOrder: Validate walks tiles, but the error names the first bad pair in
// row order — here (1,200) (a tile to the right) before (50,60) (the first tile) — whichever band of
// rows (the bands run on every core) finds a bad pair, the last one alone too; a valid matrix,
// symmetric to 1e-9 relative, passes.
func TestHessianValidateFirstInRowOrder(t *testing.T) {
	const k = 300
	h := &Hessian{K: k, Data: make([]float64, k*k)}
	for i := range k {
		for j := range k {
			h.Data[i*k+j] = float64((i+1)*(j+1)) / 7
		}
	}
	h.Data[1*k+200] *= 1 + 1e-12 // within tolerance
	if err := h.Validate(); err != nil {
		t.Fatalf("valid Hessian: %v", err)
	}
	for _, c := range []struct {
		name string
		set  func()
		want string
		is   error
	}{
		{"NaN below the diagonal of the last band only", func() { h.Data[295*k+290] = math.NaN() }, "(290,295)", ErrNotFinite},
		{"NaN in the first tile", func() { h.Data[60*k+50] = math.NaN() }, "(50,60)", ErrNotFinite},
		{"asymmetry further right, earlier row", func() { h.Data[1*k+200] += 1 }, "not symmetric at (1,200)", ErrShape},
		{"Inf on the first row", func() { h.Data[0*k+299] = math.Inf(1) }, "(0,299)", ErrNotFinite},
	} {
		c.set()
		err := h.Validate()
		if !errors.Is(err, c.is) || !strings.Contains(fmtErr(err), c.want) {
			t.Errorf("%s: %v, want %v naming %s", c.name, err, c.is, c.want)
		}
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
