package checked

import (
	"math"
	"math/big"
	"testing"
)

// TestAddMul checks Add and Mul against exact big.Int arithmetic at and around the int64 limits.
func TestAddMul(t *testing.T) {
	vals := []int64{0, 1, -1, 2, -2, 3, 1 << 31, -(1 << 31), 1 << 32, 3037000499, 3037000500, -3037000500,
		math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, math.MinInt64 + 1, math.MaxInt64 / 2, math.MinInt64 / 2}
	inRange := func(z *big.Int) bool { return z.IsInt64() }
	for _, a := range vals {
		for _, b := range vals {
			sum := new(big.Int).Add(big.NewInt(a), big.NewInt(b))
			if got, ok := Add(a, b); ok != inRange(sum) || ok && got != sum.Int64() {
				t.Errorf("Add(%d, %d) = %d, %v; exact %v", a, b, got, ok, sum)
			}
			prod := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
			if got, ok := Mul(a, b); ok != inRange(prod) || ok && got != prod.Int64() {
				t.Errorf("Mul(%d, %d) = %d, %v; exact %v", a, b, got, ok, prod)
			}
		}
	}
}
