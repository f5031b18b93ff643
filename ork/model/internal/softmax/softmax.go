// Package softmax computes the causal attention's softmax of ork/model's pure-Go build and the float32
// exponential it uses, with the bits that code has always had.
//
// Row replaces a row of scores x by exp(x_j - max)/sum: the maximum as the builtin max takes it, each
// exponential by Expf (Cephes' expf: range reduction by ln 2 in two parts, a degree-6 polynomial,
// scaling by 2^n; every operation rounded to float32, none fused), the sum in float64 in order, and
// each exponential multiplied by float32(1/sum). On AVX-512 the exponentials run sixteen at a time in
// a kernel that performs Expf's operations in the same order on each lane, on AVX2 eight at a time in
// another, so the values are the same; the maximum of a row without NaN is taken eight at a time; the
// sum stays a single ordered float64 chain.
package softmax

import "math"

// Row replaces row (at least one value) by its softmax, as the package doc says.
func Row(row []float32) {
	mx := Max(row)
	if available {
		expShift(&row[0], len(row), mx)
	} else {
		for j, x := range row {
			row[j] = Expf(x - mx)
		}
	}
	var sum float64
	for _, e := range row {
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for j := range row {
		row[j] *= inv
	}
}

// Max returns max(row[0], row[1], ...) as the builtin max takes it (NaN if any value is NaN; +0 over
// -0). A NaN's bits are those of the builtin max of the maximum so far and each value that is
// greater or NaN, in order (the builtin folded over every value can give another payload). Where a
// kernel runs, a row of eight values or more without a NaN has its maximum taken eight at a time (the
// value is the same in any order; a zero's sign is then settled as below); otherwise a compare that
// predicts well (after the first values a new maximum is rare) calls the builtin.
func Max(row []float32) float32 {
	mx, ok := float32(0), false
	if available && len(row) >= 8 {
		mx, ok = max8(&row[0], len(row))
	}
	if !ok {
		mx = maxScalar(row)
	}
	if mx == 0 { // the builtin's +0 over -0
		for _, x := range row {
			if x == 0 && !math.Signbit(float64(x)) {
				return 0
			}
		}
	}
	return mx
}

// maxScalar is Max's loop over row one value at a time, but for a zero's sign.
func maxScalar(row []float32) float32 {
	mx := row[0]
	for _, x := range row[1:] {
		if x > mx || x != x {
			mx = max(mx, x)
		}
	}
	return mx
}

// The constants of Expf, in the order the kernel reads them (consts).
const (
	expMin = -87.3 // below it Expf returns 0
	log2e  = 1.44269504088896341
	ln2Hi  = 0.693359375
	ln2Lo  = -2.12194440e-4
	p0     = 1.9875691500e-4
	p1     = 1.3981999507e-3
	p2     = 8.3334519073e-3
	p3     = 4.1665795894e-2
	p4     = 1.6666665459e-1
	p5     = 5.0000001201e-1
)

// consts holds Expf's constants as float32 for the kernel: expMin, log2e, 0.5, ln2Hi, ln2Lo, p0-p5, 1.
var consts = [12]float32{expMin, log2e, 0.5, ln2Hi, ln2Lo, p0, p1, p2, p3, p4, p5, 1}

// Expf is exp for float32 arguments in (-inf, 88], accurate to about 1 ulp; below -87.3 it returns
// 0. Each product is converted to float32 before it is added, so that no build fuses a multiply-add
// (GOAMD64=v3 would): the same bits on every amd64 level and in the kernel.
func Expf(x float32) float32 {
	if x < expMin {
		return 0
	}
	n := float32(math.Floor(float64(float32(x*log2e) + 0.5)))
	r := x - float32(n*ln2Hi) - float32(n*ln2Lo)
	p := float32(p0)
	p = float32(p*r) + p1
	p = float32(p*r) + p2
	p = float32(p*r) + p3
	p = float32(p*r) + p4
	p = float32(p*r) + p5
	y := float32(float32(p*r)*r) + r + 1
	return y * math.Float32frombits(uint32(int32(n)+127)<<23)
}
