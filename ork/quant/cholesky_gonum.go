//go:build !blas

package quant

import (
	"fmt"

	"gonum.org/v1/gonum/mat"
)

// invCholUpper returns the upper Cholesky factor of A⁻¹ for symmetric positive definite A (its
// upper triangle is read). A's storage is reused for the result, so at most about four k x k
// matrices are alive at once (A, the factor, the inverse, the second factor).
func invCholUpper(a []float64, k int) ([]float64, error) {
	var ch mat.Cholesky
	if ok := ch.Factorize(mat.NewSymDense(k, a)); !ok {
		return nil, fmt.Errorf("H + damp·I is not positive definite")
	}
	var inv mat.SymDense
	if err := ch.InverseTo(&inv); err != nil {
		return nil, fmt.Errorf("inverting H: %v", err)
	}
	ch.Reset()
	var ch2 mat.Cholesky
	if ok := ch2.Factorize(&inv); !ok {
		return nil, fmt.Errorf("H⁻¹ is not positive definite")
	}
	inv.Reset()
	var u *mat.TriDense
	if t, ok := ch2.RawU().(*mat.TriDense); ok {
		u = t // gonum's own storage: no copy
	} else {
		u = &mat.TriDense{}
		ch2.UTo(u)
	}
	raw := u.RawTriangular()
	out := a
	for i := 0; i < k; i++ {
		row := out[i*k : (i+1)*k]
		clear(row[:i])
		copy(row[i:], raw.Data[i*raw.Stride+i:i*raw.Stride+k])
	}
	for i, v := range out {
		if v != v { // NaN from a numerically broken factor
			return nil, fmt.Errorf("factor of H⁻¹ has NaN at (%d,%d)", i/k, i%k)
		}
	}
	return out, nil
}
