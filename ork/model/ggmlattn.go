package model

import (
	"math"

	"orkpipe/ork/gguf"
	"orkpipe/ork/internal/parallel"
)

// faTile is the key/value tile of ggml's tiled flash-attention kernel (GGML_FA_TILE_KV).
const faTile = 64

// flashAttentionGGML computes causal grouped-query attention for one sequence (t rows) as ggml's CPU
// flash-attention kernel does with llama.cpp's default F16 K/V cache: keys and values are binary16 (k
// and v must hold values already rounded to binary16). llama.cpp evaluates a sequence in ubatches of
// ubatch tokens (0: all t at once; the last one may be shorter), and the kernel takes one of two paths
// for the rows of a ubatch, each row computed on its own:
//
//   - 64 rows or more (ggml_compute_forward_flash_attn_ext_tiled): queries float32; the keys a row may
//     see taken in tiles of 64 positions from position 0; scores q·k (FMA over the head dimension, in
//     order) times scale; the running maximum M and sum S (float32) rescaled by expf(M_old − M_new)
//     when a tile raises M; S grown by the tile's sum of vExpf(s − M) (groups of 8, hsum8, in float64);
//     the output accumulating exp·v with FMA key by key, multiplied by 1/S at the end.
//   - fewer rows (ggml_compute_forward_flash_attn_ext_f16_one_chunk): the query rounded to binary16,
//     scores dotVecF16 times scale, key by key an online softmax whose output accumulator is binary16
//     (scaled by expf(M_old − M_new) and rounded when M rises, then fma(v, expf(s − M), acc) rounded),
//     S = fma(S, ms, vs), and the output acc·(1/S).
func flashAttentionGGML(out, q, k, v []float32, t, heads, kvHeads, hd, ubatch int) {
	qd, kvd := heads*hd, kvHeads*hd
	group := heads / kvHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	workers := parallel.Workers(heads)
	kqs, accs := make([][]float32, workers), make([][]float32, workers)
	for w := range kqs {
		kqs[w], accs[w] = make([]float32, faTile), make([]float32, hd)
	}
	parallel.ForWorker(heads, workers, func(w, h int) {
		kh := h / group
		for i := 0; i < t; i++ {
			qi, o := q[i*qd+h*hd:i*qd+(h+1)*hd], out[i*qd+h*hd:i*qd+(h+1)*hd]
			if ubatch > 0 && min(ubatch, t-i/ubatch*ubatch) < faTile {
				faRowF16(o, qi, k[kh*hd:], v[kh*hd:], i, kvd, scale, accs[w])
			} else {
				faRowTiled(o, qi, k[kh*hd:], v[kh*hd:], i, kvd, scale, kqs[w], accs[w])
			}
		}
	})
}

// faRowTiled is one row of ggml's tiled flash-attention kernel (see flashAttentionGGML): the query qi at
// position pos attends to keys and values 0..pos (k and v start at this head's values, rows kvd apart);
// kq (faTile values) and acc (len(qi) values) are scratch.
func faRowTiled(o, qi, k, v []float32, pos, kvd int, scale float32, kq, acc []float32) {
	hd := len(qi)
	m := float32(math.Inf(-1))
	var s float32
	clear(acc)
	for c0 := 0; c0 <= pos; c0 += faTile {
		n := min(faTile, pos+1-c0) // the visible keys of the tile; the rest are masked
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
		// ggml_vec_soft_max_f32 over the whole tile: masked scores give exp 0.
		var sum float64
		for g := 0; g < faTile; g += 8 {
			var e [8]float32
			for l := range e {
				if g+l < n {
					e[l] = vExpf(kq[g+l] - m)
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

// faRowF16 is one row of ggml's one-chunk flash-attention kernel with F16 K/V (see flashAttentionGGML):
// the query qi at position pos attends to keys and values 0..pos (k and v start at this head's values,
// rows kvd apart); acc is scratch of len(qi) values.
func faRowF16(o, qi, k, v []float32, pos, kvd int, scale float32, acc []float32) {
	hd := len(qi)
	q16 := make([]float32, hd)
	for j, x := range qi {
		q16[j] = gguf.F16ToF32(gguf.F32ToF16(x))
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

// round16 rounds x to the nearest binary16 (ties to even).
func round16(x float32) float32 { return gguf.F16ToF32(gguf.F32ToF16(x)) }
