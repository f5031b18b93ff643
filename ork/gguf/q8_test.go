package gguf

import (
	"encoding/binary"
	"math"
	"testing"

	"orkpipe/internal/testfiles"
)

// q8Blocks returns n Q8_0 blocks: block b's scale is the half b (mod 65536, so every half: finite,
// subnormal, Inf, NaN with its payload) and its codes run through all 256 bytes across blocks.
func q8Blocks(n int) []byte {
	src := make([]byte, 34*n)
	for b := range n {
		blk := src[34*b:]
		binary.LittleEndian.PutUint16(blk, uint16(b))
		for j := range 32 {
			blk[2+j] = byte(b*37 + j*8)
		}
	}
	return src
}

// checkQ8Kernel decodes src by the kernel and by dequantQ8_0Go and fails on the first value whose bits
// differ.
func checkQ8Kernel(t *testing.T, src []byte) {
	t.Helper()
	nb := len(src) / 34
	if nb == 0 {
		return
	}
	want := make([]float32, 32*nb)
	got := make([]float32, 32*nb+1)
	got[32*nb] = 7 // a guard the kernel must not write
	dequantQ8_0Go(src, want, nb)
	if !q8Kernel(got[:32*nb], src, nb) {
		testfiles.SkipCPU(t, "this CPU has no AVX2: the Go loop is the only Q8_0 path")
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%d blocks: value %d (block %d, scale %#04x, code %d) = %#08x, want %#08x", nb, i, i/32,
				binary.LittleEndian.Uint16(src[34*(i/32):]), int8(src[34*(i/32)+2+i%32]), math.Float32bits(got[i]), math.Float32bits(want[i]))
		}
	}
	if got[32*nb] != 7 {
		t.Fatalf("%d blocks: the kernel wrote past its output", nb)
	}
}

// TestDequantQ8_0Kernel: the AVX2 kernel gives the Go loop's bits for every half as a scale with every
// code, for block counts 0 to 9 at every start block, and through Dequantize with and without it.
func TestDequantQ8_0Kernel(t *testing.T) {
	src := q8Blocks(1 << 16)
	checkQ8Kernel(t, src)
	for off := range 5 {
		for n := range 10 {
			checkQ8Kernel(t, src[34*(0x7bfe+off):34*(0x7bfe+off+n)])
		}
	}
	kernel := hasQ8Kernel
	defer func() { hasQ8Kernel = kernel }()
	var outs [2][]float32
	for i, k := range []bool{kernel, false} {
		hasQ8Kernel = k
		outs[i] = make([]float32, 32<<16)
		if err := Dequantize(TypeQ8_0, src, outs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range outs[0] {
		if math.Float32bits(outs[0][i]) != math.Float32bits(outs[1][i]) {
			t.Fatalf("Dequantize value %d: kernel %#08x, Go loop %#08x", i, math.Float32bits(outs[0][i]), math.Float32bits(outs[1][i]))
		}
	}
}

// FuzzDequantQ8_0Kernel: arbitrary bytes, cut to whole blocks, decode to the same bits by the kernel as by
// the Go loop. Seeds in testdata/fuzz/FuzzDequantQ8_0Kernel.
func FuzzDequantQ8_0Kernel(f *testing.F) {
	f.Add(q8Blocks(3))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkQ8Kernel(t, data[:len(data)/34*34])
	})
}

// BenchmarkDequantizeQ8_0Panel: a 64-row panel of a 5120-wide Q8_0 weight (1.25 MiB of float32, as
// model.Encoded decodes a panel into a core's cache): the AVX2 kernel (subject) against the Go loop
// (baseline).
func BenchmarkDequantizeQ8_0Panel(b *testing.B) {
	if !hasQ8Kernel {
		testfiles.SkipCPU(b, "this CPU has no AVX2: the Go loop is the only path")
	}
	src := randomBlocks(TypeQ8_0, 64*5120/32)
	dst := make([]float32, 64*5120)
	defer func() { hasQ8Kernel = true }()
	with := func(kernel bool) func() error {
		return func() error {
			hasQ8Kernel = kernel
			return Dequantize(TypeQ8_0, src, dst)
		}
	}
	reportPair(b, int64(len(src)), with(false), with(true))
}
