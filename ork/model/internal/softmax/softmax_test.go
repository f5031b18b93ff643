package softmax

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"

	"orkpipe/internal/testfiles"
)

// TestKernelMatchesExpf runs the kernel over every 97th float32 below 89 down to -inf's neighbourhood
// (both sides of expMin and of the subnormal results), the specials (±0, ±inf, NaNs with payloads,
// subnormals) and random values with random shifts, at every tail length, against Expf bit for bit;
// the values past the last are not written.
func TestKernelMatchesExpf(t *testing.T) {
	forKernels(t, func(kernel string) { kernelMatchesExpf(t, kernel) })
}

// forKernels runs f with each kernel this CPU has selected (expShift16 on AVX-512, expShift8 on AVX2),
// and skips the test where it has none (Row calls Expf).
func forKernels(t *testing.T, f func(kernel string)) {
	t.Helper()
	ran := false
	forPaths(t, func(path string) {
		if path != "go" {
			ran = true
			f(path)
		}
	})
	if !ran {
		testfiles.SkipCPU(t, "no AVX2 or AVX-512: Row calls Expf, no kernel runs")
	}
}

// forPaths runs f on each of Row's paths this CPU has, named: "go" (Expf a value at a time), "avx2"
// (expShift8) and "avx512" (expShift16), restoring the selection after.
func forPaths(tb testing.TB, f func(path string)) {
	on, on512 := available, available512
	defer func() { available, available512 = on, on512 }()
	for _, p := range []struct {
		name                string
		kernel, has, avx512 bool
	}{
		{"go", false, true, false},
		{"avx2", true, cpu.X86.HasAVX2, false},
		{"avx512", true, on512, true},
	} {
		if !p.has {
			tb.Logf("path %s: not on this CPU", p.name)
			continue
		}
		available, available512 = p.kernel, p.avx512
		f(p.name)
	}
}

func kernelMatchesExpf(t *testing.T, kernel string) {
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
		expShift(&got[0], len(xs), mx)
		for i, v := range got[len(xs):] {
			if v != 7 {
				t.Fatalf("%s: %d values: value %d past them changed to %v", kernel, len(xs), i, v)
			}
		}
		for i, x := range xs {
			if want := Expf(x - mx); math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("%s: expShift(x %v (%#x), mx %v) = %v (%#x), Expf %v (%#x)", kernel, x, math.Float32bits(x), mx,
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
	forPaths(t, func(path string) {
		for i, row := range rows {
			t.Run(fmt.Sprintf("%s_%d", path, i), func(t *testing.T) {
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
	})
}

// maxBefore is Max as it was before its kernel: the builtin max of the maximum so far and each value
// that is greater or NaN (a NaN's payload then depends on which values reach the builtin), and +0 over
// -0.
func maxBefore(row []float32) float32 {
	mx := row[0]
	for _, x := range row[1:] {
		if x > mx || x != x {
			mx = max(mx, x)
		}
	}
	if mx == 0 {
		for _, x := range row {
			if x == 0 && !math.Signbit(float64(x)) {
				return 0
			}
		}
	}
	return mx
}

// TestMaxMatchesBefore checks Max on every path against the code it replaced (maxBefore) bit for
// bit, and its values against the builtin max folded over the row: every length to 70 (the kernel's blocks of eight, four at a time, and its overlapping last
// block), rows of zeros of both signs only, a NaN (payloads, either sign) at every position, two
// NaNs, infinities, and a maximum at every position.
func TestMaxMatchesBefore(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	neg0 := float32(math.Copysign(0, -1))
	nan := func() float32 {
		return math.Float32frombits(0x7fc00000 | uint32(r.IntN(1<<22)) | uint32(r.IntN(2))<<31)
	}
	var rows [][]float32
	for n := 1; n <= 70; n++ {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * 5)
		}
		rows = append(rows, v)
		zeros := make([]float32, n)
		for i := range zeros {
			if r.IntN(2) == 0 {
				zeros[i] = neg0
			}
		}
		negs := make([]float32, n) // a maximum of -0 among negatives, or of +0 at one place
		for i := range negs {
			negs[i] = -1 - float32(i)
		}
		negs[r.IntN(n)] = neg0
		rows = append(rows, zeros, negs, append(append([]float32(nil), negs...)[:n-1], 0))
		for i := range n {
			w := append([]float32(nil), v...)
			w[i] = nan()
			top := append([]float32(nil), v...)
			top[i] = 100
			rows = append(rows, w, top)
			if n > 1 {
				w2 := append([]float32(nil), w...)
				w2[(i+1+r.IntN(n-1))%n] = nan()
				inf := append([]float32(nil), v...)
				inf[i] = float32(math.Inf(1 - 2*r.IntN(2)))
				rows = append(rows, w2, inf)
			}
		}
	}
	forPaths(t, func(path string) {
		for _, row := range rows {
			want, fold := maxBefore(row), row[0]
			for _, x := range row[1:] {
				fold = max(fold, x)
			}
			if fold == fold && math.Float32bits(fold) != math.Float32bits(want) || fold != fold && want == want {
				t.Fatalf("maxBefore(%v) = %v (%#x), the builtin's fold %v (%#x)", row, want, math.Float32bits(want), fold, math.Float32bits(fold))
			}
			if got := Max(row); math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%s: Max(%v) = %v (%#x), want %v (%#x)", path, row, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
	})
}

// BenchmarkRow is the softmax of a 512-wide row of scores on each of Row's paths this CPU has.
func BenchmarkRow(b *testing.B) {
	r := rand.New(rand.NewPCG(21, 22))
	src := make([]float32, 512)
	for i := range src {
		src[i] = float32(r.NormFloat64() * 3)
	}
	row := make([]float32, len(src))
	forPaths(b, func(path string) {
		b.Run(path, func(b *testing.B) {
			for b.Loop() {
				copy(row, src)
				Row(row)
			}
		})
	})
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
