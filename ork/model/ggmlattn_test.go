package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"orkpipe/ork/gguf"
	"orkpipe/ork/internal/parallel"
	"orkpipe/ork/model/internal/fma"
)

// TestFlashAttentionGGMLMatchesRowByRow holds flashAttentionGGML (its products in fma.AxpyRows over
// tiles of transposed keys, its binary16 accumulator in fma's rounding kernels) to the per-value loops
// it replaced, bit for bit: head widths with and without a tail of eights, sequences across tile
// boundaries, grouped heads, both kernel paths and a sequence whose ubatches take both.
func TestFlashAttentionGGMLMatchesRowByRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, c := range []struct{ tokens, heads, kvHeads, hd, ubatch int }{
		{1, 1, 1, 8, 0}, {63, 2, 1, 8, 0}, {64, 2, 2, 16, 0}, {65, 4, 2, 12, 0}, {130, 4, 1, 72, 0},
		{200, 2, 1, 256, 0}, {40, 4, 2, 16, 32}, {100, 2, 1, 72, 32}, {150, 4, 2, 64, 100}, {129, 2, 2, 8, 64},
	} {
		qd := c.heads * c.hd
		q, k, v := randomQKV(rng, c.tokens, c.heads, c.kvHeads, c.hd, 2)
		got, want := make([]float32, len(q)), make([]float32, len(q))
		flashAttentionGGML(got, q, k, v, c.tokens, c.heads, c.kvHeads, c.hd, c.ubatch)
		flashAttentionRef(want, q, k, v, c.tokens, c.heads, c.kvHeads, c.hd, c.ubatch)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%+v: out[%d] (row %d) = %v, the per-value loops %v", c, i, i/qd, got[i], want[i])
			}
		}
	}
	t.Run("roundF16", func(t *testing.T) {
		x := make([]float32, 1003)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(50)-30)))
		}
		want := make([]float32, len(x))
		for i, v := range x {
			want[i] = gguf.F16ToF32(gguf.F32ToF16(v))
		}
		roundF16(x)
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(want[i]) {
				t.Fatalf("roundF16: x[%d] = %v, want %v", i, x[i], want[i])
			}
		}
	})
}

// randomQKV returns the queries, keys and values of a sequence of tokens rows: normal values times sd,
// the keys and values rounded to binary16 (as llama.cpp's F16 cache holds them).
func randomQKV(rng *rand.Rand, tokens, heads, kvHeads, hd int, sd float64) (q, k, v []float32) {
	q, k, v = make([]float32, tokens*heads*hd), make([]float32, tokens*kvHeads*hd), make([]float32, tokens*kvHeads*hd)
	for _, s := range [][]float32{q, k, v} {
		for i := range s {
			s[i] = float32(rng.NormFloat64() * sd)
		}
	}
	roundF16(k)
	roundF16(v)
	return q, k, v
}

// flashAttentionRef is flashAttentionGGML as it was computed value by value (session 58), the reference
// for its kernels (its heads on as many goroutines).
func flashAttentionRef(out, q, k, v []float32, t, heads, kvHeads, hd, ubatch int) {
	qd, kvd := heads*hd, kvHeads*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	workers := parallel.Workers(heads)
	kqs, accs := make([][]float32, workers), make([][]float32, workers)
	for w := range kqs {
		kqs[w], accs[w] = make([]float32, faTile), make([]float32, hd)
	}
	parallel.ForWorker(heads, workers, func(w, h int) {
		kh := h / (heads / kvHeads)
		for i := range t {
			qi, o := q[i*qd+h*hd:i*qd+(h+1)*hd], out[i*qd+h*hd:i*qd+(h+1)*hd]
			if ubatch > 0 && min(ubatch, t-i/ubatch*ubatch) < faTile {
				faRowF16Ref(o, qi, k[kh*hd:], v[kh*hd:], i, kvd, scale, accs[w])
			} else {
				faRowTiledRef(o, qi, k[kh*hd:], v[kh*hd:], i, kvd, scale, kqs[w], accs[w])
			}
		}
	})
}

func faRowTiledRef(o, qi, k, v []float32, pos, kvd int, scale float32, kq, acc []float32) {
	hd := len(qi)
	m := float32(math.Inf(-1))
	var s float32
	clear(acc)
	for c0 := 0; c0 <= pos; c0 += faTile {
		n := min(faTile, pos+1-c0)
		tmax := float32(math.Inf(-1))
		for c := 0; c < n; c++ {
			kc := k[(c0+c)*kvd : (c0+c)*kvd+hd]
			var d float32
			for j, qv := range qi {
				d = fma32(kc[j], qv, d)
			}
			kq[c] = d * scale
			tmax = max(tmax, kq[c])
		}
		if mn := max(m, tmax); mn > m {
			ms := expf64(m - mn)
			for j := range acc {
				acc[j] *= ms
			}
			s *= ms
			m = mn
		}
		var sum float64
		for g := 0; g < faTile; g += 8 {
			var e [8]float32
			for l := range e {
				if g+l < n {
					e[l] = fma.Expf(kq[g+l] - m)
				}
			}
			sum += float64(hsum8(&e))
			copy(kq[g:min(g+8, faTile)], e[:])
		}
		s = float32(float64(s) + sum)
		for c := 0; c < n; c++ {
			vc := v[(c0+c)*kvd : (c0+c)*kvd+hd]
			p := kq[c]
			for j := range acc {
				acc[j] = fma32(vc[j], p, acc[j])
			}
		}
	}
	inv := float32(0)
	if s != 0 {
		inv = 1 / s
	}
	for j, a := range acc {
		o[j] = a * inv
	}
}

func faRowF16Ref(o, qi, k, v []float32, pos, kvd int, scale float32, acc []float32) {
	round16 := func(x float32) float32 { return gguf.F16ToF32(gguf.F32ToF16(x)) }
	hd := len(qi)
	q16 := make([]float32, hd)
	for j, x := range qi {
		q16[j] = round16(x)
	}
	m := float32(math.Inf(-1))
	var s float32
	clear(acc)
	for c := 0; c <= pos; c++ {
		sc := dotVecF16(k[c*kvd:c*kvd+hd], q16) * scale
		ms, vs := float32(1), float32(1)
		if sc > m {
			ms = expf64(m - sc)
			m = sc
			for j, a := range acc {
				acc[j] = round16(a * ms)
			}
		} else {
			vs = expf64(sc - m)
		}
		vc := v[c*kvd : c*kvd+hd]
		for j, a := range acc {
			acc[j] = round16(fma32(vc[j], vs, a))
		}
		s = fma32(s, ms, vs)
	}
	inv := float32(0)
	if s != 0 {
		inv = 1 / s
	}
	for j, a := range acc {
		o[j] = a * inv
	}
}

// BenchmarkFlashAttentionGGML is one 512-token sequence of Qwen3.6-27B's gated attention (24 query
// heads, 4 key/value heads of 256) through ggml's tiled kernel (one ubatch) and its one-chunk kernel
// (ubatches of 32), and the per-value loops they replaced.
func BenchmarkFlashAttentionGGML(b *testing.B) {
	const tokens, heads, kvHeads, hd = 512, 24, 4, 256
	q, k, v := randomQKV(rand.New(rand.NewPCG(23, 24)), tokens, heads, kvHeads, hd, 1)
	out := make([]float32, len(q))
	for _, ubatch := range []int{0, 32} {
		b.Run(fmt.Sprintf("ubatch=%d", ubatch), func(b *testing.B) {
			for b.Loop() {
				flashAttentionGGML(out, q, k, v, tokens, heads, kvHeads, hd, ubatch)
			}
		})
		b.Run(fmt.Sprintf("ubatch=%d/per-value", ubatch), func(b *testing.B) {
			for b.Loop() {
				flashAttentionRef(out, q, k, v, tokens, heads, kvHeads, hd, ubatch)
			}
		})
	}
}
