package calib

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"orkpipe/internal/testfiles"
)

// encodeBoth runs encodeValues on row with the kernel and with the Go loop alone and fails unless both
// give the same bytes and the same error.
func encodeBoth(t *testing.T, row []float64) {
	t.Helper()
	if len(row) == 0 {
		return
	}
	kernel := hasF32Kernel
	defer func() { hasF32Kernel = kernel }()
	var out [2][]byte
	var errs [2]error
	for i, k := range []bool{kernel, false} {
		hasF32Kernel = k
		out[i] = make([]byte, 4*len(row)+4)
		errs[i] = encodeValues(3, 5, row, out[i])
	}
	if fmt.Sprint(errs[0]) != fmt.Sprint(errs[1]) {
		t.Fatalf("%d values: error %v with the kernel, %v without", len(row), errs[0], errs[1])
	}
	if errs[0] == nil && !bytes.Equal(out[0], out[1]) {
		for c := range row {
			a, b := binary.LittleEndian.Uint32(out[0][4*c:]), binary.LittleEndian.Uint32(out[1][4*c:])
			if a != b {
				t.Fatalf("%d values: value %d (%v) -> %#08x with the kernel, %#08x without", len(row), c, row[c], a, b)
			}
		}
		t.Fatalf("%d values: the kernel wrote past the row", len(row))
	}
}

// TestEncodeValuesKernel: the AVX2 conversion gives the Go loop's bits for values of every magnitude —
// float32 ties (rounded to even), float32 subnormals and values below them, ±0, the largest float32 and
// the doubles just past it that round to it or overflow — at every position and length around its block
// of eight, and stops so that the Go loop reports a non-finite value or one beyond float32 at its place.
func TestEncodeValuesKernel(t *testing.T) {
	special := []float64{0, math.Copysign(0, -1), 1, -1, 1 + 0x1p-24, 1 + 0x3p-24, 0x1p-149, 0x1p-150, 0x1.8p-150, 1e-300,
		math.MaxFloat32, -math.MaxFloat32, math.MaxFloat32 * (1 + 0x1p-25), math.MaxFloat32 * (1 + 0x1p-23), 1e300,
		math.Inf(1), math.Inf(-1), math.NaN(), 12345.678, -0.1}
	r := rand.New(rand.NewPCG(7, 8))
	for _, v := range special {
		for at := range 17 {
			for n := at + 1; n <= 26; n++ {
				row := make([]float64, n)
				for i := range row {
					row[i] = r.NormFloat64() * math.Pow(10, float64(r.IntN(20)-10))
				}
				row[at] = v
				encodeBoth(t, row)
			}
		}
	}
	// A diagonal row with a negative first value fails before any conversion, either way.
	encodeBoth(t, []float64{-1, 2, 3, 4, 5, 6, 7, 8, 9})
	row := make([]float64, 1<<16)
	for i := range row {
		row[i] = r.NormFloat64() * 1e4
	}
	encodeBoth(t, row)
	if !hasF32Kernel {
		t.Log("this CPU has no AVX2: only the Go loop was checked")
	}
}

// FuzzEncodeValues: arbitrary bytes read as float64s encode to the same bytes and errors with the kernel
// as with the Go loop. Seeds in testdata/fuzz/FuzzEncodeValues.
func FuzzEncodeValues(f *testing.F) {
	seed := make([]byte, 8*19)
	for i := range 19 {
		binary.LittleEndian.PutUint64(seed[8*i:], math.Float64bits(float64(i)*1.1-3))
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		row := make([]float64, len(data)/8)
		for i := range row {
			row[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
		}
		encodeBoth(t, row)
	})
}

// BenchmarkEncodeValues: a 17408-wide Hessian row (64 KiB of float32 out) encoded with the AVX2 kernel
// and with the Go loop alone, interleaved; reports both times and their ratio.
func BenchmarkEncodeValues(b *testing.B) {
	if !hasF32Kernel {
		testfiles.SkipCPU(b, "this CPU has no AVX2: the Go loop is the only path")
	}
	row := make([]float64, 17408)
	for i := range row {
		row[i] = float64(i%97)*13.7 - 50
	}
	dst := make([]byte, 4*len(row))
	defer func() { hasF32Kernel = true }()
	var el [2]float64
	for b.Loop() {
		for i, k := range []bool{false, true} {
			hasF32Kernel = k
			start := cpuNow()
			if err := encodeValues(0, 1, row, dst); err != nil {
				b.Fatal(err)
			}
			el[i] += (cpuNow() - start).Seconds()
		}
	}
	b.ReportMetric(el[0]/float64(b.N)*1e6, "go-loop-µs")
	b.ReportMetric(el[1]/float64(b.N)*1e6, "kernel-µs")
	b.ReportMetric(el[1]/el[0], "kernel/go-loop")
}
