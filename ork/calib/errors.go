package calib

import "errors"

// Sentinel errors; messages add the file, tensor or field involved.
var (
	// ErrFormat: a hidden-states, Hessian or imatrix file is malformed (magic, version, header fields,
	// length).
	ErrFormat = errors.New("invalid calibration file")
	// ErrCorrupt: a file's BLAKE3 digest does not match its content.
	ErrCorrupt = errors.New("calibration file corrupt")
	// ErrShape: sizes disagree (hidden width, sequence length, window bounds, Hessian size).
	ErrShape = errors.New("shape mismatch")
	// ErrNotFinite: a Hessian holds NaN or Inf, or is not symmetric.
	ErrNotFinite = errors.New("hessian not finite or not symmetric")
)
