package softmax

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestKernelMatchesExpf runs the kernel over every 97th float32 below 89 down to -inf's neighbourhood
// (both sides of expMin and of the subnormal results), the specials (±0, ±inf, NaNs with payloads,
// subnormals) and random values with random shifts, at every tail length, against Expf bit for bit;
// the values past the last are not written.
func TestKernelMatchesExpf(t *testing.T) {
	if !available {
		t.Skip("no AVX-512: Row calls Expf, the kernel does not run")
	}
	var xs []float32
	for b := uint32(0); b < 0x42b20000; b += 97 { // 0 .. 89
		xs = append(xs, math.Float32frombits(b), math.Float32frombits(b|1<<31))
	}
	for b := uint32(0xc2a00000); b < 0xc2c80000; b += 3 { // -80 .. -100, densely: expMin and the subnormal results
		xs = append(xs, math.Float32frombits(b))
	}
	nan := math.Float32frombits
	xs = append(xs, 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		nan(0x7fc00001), nan(0xffc12345), nan(0x7f800001), nan(0xff812345), nan(1), nan(0x807fffff), expMin,
		math.Nextafter32(expMin, 0), math.Nextafter32(expMin, -100))
	check := func(xs []float32, mx float32) {
		t.Helper()
		got := append(append([]float32(nil), xs...), 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7)
		expShift(&got[0], len(xs), mx, &consts)
		for i, v := range got[len(xs):] {
			if v != 7 {
				t.Fatalf("%d values: value %d past them changed to %v", len(xs), i, v)
			}
		}
		for i, x := range xs {
			if want := Expf(x - mx); math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("expShift(x %v (%#x), mx %v) = %v (%#x), Expf %v (%#x)", x, math.Float32bits(x), mx,
					got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
			}
		}
	}
	check(xs, 0)
	r := rand.New(rand.NewPCG(17, 18))
	for n := 1; n <= 40; n++ {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * 30)
		}
		check(v, float32(r.NormFloat64()*30))
		check(v, float32(math.NaN()))
	}
}

// reference is the softmax ork/model always computed: the builtin max, then Expf one value at a time.
func reference(row []float32) {
	mx := row[0]
	for _, x := range row[1:] {
		mx = max(mx, x)
	}
	var sum float64
	for j, x := range row {
		e := Expf(x - mx)
		row[j] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for j := range row {
		row[j] *= inv
	}
}

// TestRowMatchesReference checks Row on both paths against the reference bit for bit: lengths around
// the kernel's sixteens, scores spread so wide that most exponentials underflow to 0, signed zeros
// only (the builtin's +0 over -0), infinities and NaNs.
func TestRowMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	neg0 := float32(math.Copysign(0, -1))
	var rows [][]float32
	for _, n := range []int{1, 2, 15, 16, 17, 33, 64, 100, 513} {
		for _, spread := range []float64{1, 8, 200} {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(r.NormFloat64() * spread)
			}
			rows = append(rows, v)
		}
	}
	rows = append(rows, []float32{neg0, 0, neg0}, []float32{neg0, neg0}, []float32{-1, float32(math.Inf(1)), 2},
		[]float32{3, float32(math.Inf(-1)), 1}, []float32{1, float32(math.NaN()), 2}, []float32{float32(math.Inf(-1))})
	z := available
	defer func() { available = z }()
	for _, on := range []bool{false, true} {
		if on && !z {
			continue
		}
		available = on
		for i, row := range rows {
			t.Run(fmt.Sprintf("kernel%v_%d", on, i), func(t *testing.T) {
				want, got := append([]float32(nil), row...), append([]float32(nil), row...)
				reference(want)
				Row(got)
				for j := range want {
					if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
						t.Fatalf("value %d of %d: %v (%#x), reference %v (%#x)", j, len(row), got[j], math.Float32bits(got[j]), want[j], math.Float32bits(want[j]))
					}
				}
			})
		}
	}
}

// BenchmarkRow is the softmax of a 512-wide row of scores: the kernel's path and Expf's.
func BenchmarkRow(b *testing.B) {
	r := rand.New(rand.NewPCG(21, 22))
	src := make([]float32, 512)
	for i := range src {
		src[i] = float32(r.NormFloat64() * 3)
	}
	row := make([]float32, len(src))
	z := available
	defer func() { available = z }()
	for _, on := range []bool{true, false} {
		if on && !z {
			continue
		}
		available = on
		b.Run(fmt.Sprintf("kernel=%v", on), func(b *testing.B) {
			for b.Loop() {
				copy(row, src)
				Row(row)
			}
		})
	}
}

// TestExpfAccuracy checks Expf against math.Exp on [-87, 0] (within 3e-7 relative) and its ends.
func TestExpfAccuracy(t *testing.T) {
	worst := 0.0
	for x := float32(-87); x <= 0; x += 0.000731 {
		want := math.Exp(float64(x))
		got := float64(Expf(x))
		worst = math.Max(worst, math.Abs(got-want)/want)
	}
	t.Logf("Expf: worst relative error %.3g on [-87, 0]", worst)
	if worst > 3e-7 {
		t.Errorf("Expf relative error %.3g, want <= 3e-7", worst)
	}
	if Expf(-100) != 0 || Expf(0) != 1 {
		t.Errorf("Expf(-100) = %v, Expf(0) = %v", Expf(-100), Expf(0))
	}
}
