//go:build !amd64 || noasm || gccgo || safe

package quant

// poconRows is false where gonum's Ddot and Daxpy are its Go loops (one running sum; multiply-adds
// the compiler may fuse), which the row-order solves do not follow: poconUpper calls gonum's Dpocon.
const poconRows = false
