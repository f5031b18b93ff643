//go:build !linux

package calib

// prefaultUpper does nothing where MADV_POPULATE_WRITE does not exist: the pages fault as they are
// first written.
func prefaultUpper(*Hessian) {}
