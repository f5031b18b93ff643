package quant

import "errors"

// Sentinel errors. Every error returned by this package that matches one of them wraps it with
// the tensor name, the field and the expected value.
var (
	// ErrShape reports a length or dimension that does not match what the operation needs.
	ErrShape = errors.New("quant: shape mismatch")
	// ErrParam reports an invalid option or parameter (bits, group size, clip grid, ...).
	ErrParam = errors.New("quant: invalid parameter")
	// ErrNotFinite reports a NaN or infinite input value.
	ErrNotFinite = errors.New("quant: value not finite")
	// ErrCholesky reports a Hessian that stays not positive definite after every damping retry.
	ErrCholesky = errors.New("quant: Cholesky factorisation failed")
)
