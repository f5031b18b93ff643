package model

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"orkpipe/ork/gguf"
)

// BenchmarkGGMLMatmul is one ggml-exact matrix product at a 27B's width: a 5120 x 5120 weight in Q8_0
// (quantize_row_q8_0 and ggml_vec_dot_q8_0_q8_0 per output) and in F16 (llamafile's tinyBLAS per
// output), over 64 tokens.
func BenchmarkGGMLMatmul(b *testing.B) {
	const n, k, t = 5120, 5120, 64
	rng := rand.New(rand.NewPCG(29, 30))
	x, y := make([]float32, t*k), make([]float32, t*n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	q8 := make([]byte, n*k/32*34)
	for blk := 0; blk < len(q8); blk += 34 {
		binary.LittleEndian.PutUint16(q8[blk:], gguf.F32ToF16(float32(rng.Float64()/64)))
		for i := 2; i < 34; i++ {
			q8[blk+i] = byte(rng.IntN(255) - 127)
		}
	}
	f16 := make([]byte, 2*n*k)
	for i := 0; i < n*k; i++ {
		binary.LittleEndian.PutUint16(f16[2*i:], gguf.F32ToF16(float32(rng.NormFloat64()/64)))
	}
	for _, c := range []struct {
		name string
		typ  gguf.Type
		raw  []byte
	}{{"q8_0", gguf.TypeQ8_0, q8}, {"f16", gguf.TypeF16, f16}} {
		m, err := newGGMLMatmul(c.typ, n, k, c.raw, false)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := m.Apply(y, x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestGGMLMatmulTokenBlocks checks that Apply's outputs do not depend on how many tokens it takes at
// once (ggmlTokenBlock, the workers' split): 1 to 19 tokens against each token applied alone, bit for
// bit, for Q8_0, F16 (tinyBLAS and ggml_vec_dot_f16) and F32 weights.
func TestGGMLMatmulTokenBlocks(t *testing.T) {
	const n, k = 12, 96
	rng := rand.New(rand.NewPCG(31, 32))
	q8, f16, f32 := make([]byte, n*k/32*34), make([]byte, 2*n*k), make([]byte, 4*n*k)
	for blk := 0; blk < len(q8); blk += 34 {
		binary.LittleEndian.PutUint16(q8[blk:], gguf.F32ToF16(float32(rng.Float64()/64)))
		for i := 2; i < 34; i++ {
			q8[blk+i] = byte(rng.IntN(255) - 127)
		}
	}
	for i := range n * k {
		binary.LittleEndian.PutUint16(f16[2*i:], gguf.F32ToF16(float32(rng.NormFloat64())))
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(float32(rng.NormFloat64())))
	}
	for _, c := range []struct {
		typ gguf.Type
		raw []byte
		vec bool
	}{{gguf.TypeQ8_0, q8, false}, {gguf.TypeF16, f16, false}, {gguf.TypeF16, f16, true}, {gguf.TypeF32, f32, false}, {gguf.TypeF32, f32, true}} {
		m, err := newGGMLMatmul(c.typ, n, k, c.raw, c.vec)
		if err != nil {
			t.Fatal(err)
		}
		for tokens := 1; tokens <= 19; tokens++ {
			x, y, one := make([]float32, tokens*k), make([]float32, tokens*n), make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			if err := m.Apply(y, x); err != nil {
				t.Fatal(err)
			}
			for r := range tokens {
				if err := m.Apply(one, x[r*k:(r+1)*k]); err != nil {
					t.Fatal(err)
				}
				for i, v := range one {
					if math.Float32bits(y[r*n+i]) != math.Float32bits(v) {
						t.Fatalf("%s vec %v, %d tokens: token %d output %d = %v, alone %v", c.typ, c.vec, tokens, r, i, y[r*n+i], v)
					}
				}
			}
		}
	}
}
