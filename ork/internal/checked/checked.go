// Package checked adds and multiplies int64 values and reports overflow instead of wrapping, for sums
// and products of sizes or counts that come from files or flags (a pack entry's dimensions, a
// residency plan's byte counts), where a wrapped value would pass a bound it exceeds.
package checked

import "math"

// Add returns a+b and true, or 0 and false when the sum overflows int64.
func Add(a, b int64) (int64, bool) {
	if (b > 0 && a > math.MaxInt64-b) || (b < 0 && a < math.MinInt64-b) {
		return 0, false
	}
	return a + b, true
}

// Mul returns a·b and true, or 0 and false when the product overflows int64.
func Mul(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	p := a * b
	if p/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		return 0, false
	}
	return p, true
}
