package model

import (
	"math"

	"orkpipe/ork/internal/parallel"
	"orkpipe/ork/model/internal/fma"
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
//     when a tile raises M; S grown by the tile's sum of fma.Expf(s − M) (groups of 8, hsum8, in float64);
//     the output accumulating exp·v with FMA key by key, multiplied by 1/S at the end.
//   - fewer rows (ggml_compute_forward_flash_attn_ext_f16_one_chunk): the query rounded to binary16,
//     scores dotVecF16 times scale, key by key an online softmax whose output accumulator is binary16
//     (scaled by expf(M_old − M_new) and rounded when M rises, then fma(v, expf(s − M), acc) rounded),
//     S = fma(S, ms, vs), and the output acc·(1/S).
func flashAttentionGGML(out, q, k, v []float32, t, heads, kvHeads, hd, ubatch int) {
	qd, kvd := heads*hd, kvHeads*hd
	group := heads / kvHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	short := func(i int) bool { return ubatch > 0 && min(ubatch, t-i/ubatch*ubatch) < faTile }
	var kt []float32
	if !short(0) { // the first ubatch is full-sized unless it is the only one: if it is short, all are
		kt = transposeKeyTiles(k, t, kvHeads, hd)
	}
	workers := parallel.Workers(heads)
	kqs, accs, q16s := make([][]float32, workers), make([][]float32, workers), make([][]float32, workers)
	for w := range kqs {
		kqs[w], accs[w], q16s[w] = make([]float32, faTile), make([]float32, hd), make([]float32, hd)
	}
	tiles := (t + faTile - 1) / faTile
	parallel.ForWorker(heads, workers, func(w, h int) {
		kh := h / group
		for i := 0; i < t; i++ {
			qi, o := q[i*qd+h*hd:i*qd+(h+1)*hd], out[i*qd+h*hd:i*qd+(h+1)*hd]
			if short(i) {
				faRowF16(o, qi, k[kh*hd:], v[kh*hd:], i, kvd, scale, q16s[w], accs[w])
			} else {
				faRowTiled(o, qi, kt[kh*tiles*faTile*hd:], v[kh*hd:], i, kvd, scale, kqs[w], accs[w])
			}
		}
	})
}

// transposeKeyTiles lays out the keys of each of the kvHeads heads (t rows of k, kvHeads·hd values
// apart) as ggml's tiled kernel packs them: tiles of faTile positions, each hd rows of faTile values
// (row d holds dimension d of the tile's keys), the last tile padded with zeros. Head h's tiles start
// at h·⌈t/faTile⌉·faTile·hd.
func transposeKeyTiles(k []float32, t, kvHeads, hd int) []float32 {
	tiles := (t + faTile - 1) / faTile
	kt := make([]float32, kvHeads*tiles*faTile*hd)
	parallel.For(kvHeads, parallel.Workers(kvHeads), func(h int) {
		for tile := range tiles {
			dst := kt[(h*tiles+tile)*faTile*hd:][:faTile*hd]
			for c := range min(faTile, t-tile*faTile) {
				key := k[(tile*faTile+c)*kvHeads*hd+h*hd:][:hd]
				for d, x := range key {
					dst[d*faTile+c] = x
				}
			}
		}
	})
	return kt
}

// faRowTiled is one row of ggml's tiled flash-attention kernel (see flashAttentionGGML): the query qi at
// position pos attends to keys and values 0..pos (kt holds this head's keys in tiles, as
// transposeKeyTiles lays them out; v starts at this head's values, rows kvd apart); kq (faTile values)
// and acc (len(qi) values) are scratch. Both products are simd_gemm's: each output an FMA chain in
// order (fma.AxpyRows).
func faRowTiled(o, qi, kt, v []float32, pos, kvd int, scale float32, kq, acc []float32) {
	hd := len(qi)
	m := float32(math.Inf(-1))
	var s float32
	clear(acc)
	for c0 := 0; c0 <= pos; c0 += faTile {
		n := min(faTile, pos+1-c0) // the visible keys of the tile; the rest are masked
		clear(kq)
		fma.AxpyRows(kq, kt[c0*hd:][:faTile*hd], faTile, qi)
		tmax := float32(math.Inf(-1))
		for c := range n {
			kq[c] *= scale
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
					e[l] = fma.Expf(kq[g+l] - m)
				}
			}
			sum += float64(hsum8(&e))
			copy(kq[g:min(g+8, faTile)], e[:])
		}
		s = float32(float64(s) + sum)
		fma.AxpyRows(acc, v[c0*kvd:], kvd, kq[:n])
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
// rows kvd apart); q16 and acc are scratch of len(qi) values. The binary16 accumulator's updates are
// ggml_vec_scale_f16 and ggml_vec_mad_f16 (fma.ScaleRound16, fma.AxpyRound16).
func faRowF16(o, qi, k, v []float32, pos, kvd int, scale float32, q16, acc []float32) {
	hd := len(qi)
	copy(q16, qi)
	fma.Round16(q16)
	m := float32(math.Inf(-1))
	var s float32
	clear(acc)
	for c := 0; c <= pos; c++ {
		sc := dotVecF16(k[c*kvd:c*kvd+hd], q16) * scale
		ms, vs := float32(1), float32(1)
		if sc > m {
			ms = expf64(m - sc)
			m = sc
			fma.ScaleRound16(acc, ms)
		} else {
			vs = expf64(sc - m)
		}
		fma.AxpyRound16(acc, v[c*kvd:c*kvd+hd], vs)
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
