//go:build amd64 && !noasm && !gccgo && !safe

package quant

// poconRows says whether poconUpper runs its row-order solves: where gonum's Ddot and Daxpy are its
// amd64 assembly (DotInc's two partial sums, no fused multiply-add), whose arithmetic they follow.
const poconRows = true
