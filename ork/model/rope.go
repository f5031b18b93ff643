package model

import "math"

// ropeTable holds cos/sin per position and rotated pair.
type ropeTable struct {
	neox bool
	// fma rotates as ggml's compiled rotate_pairs: x0·cos − (x1·sin) and x0·sin + (x1·cos), each with
	// the parenthesized product rounded and the rest one fused multiply-add.
	fma      bool
	dim      int
	t        int       // positions tabulated
	cos, sin []float32 // [pos][dim/2]
}

// ropeFor returns the RoPE table of positions 0..t-1 for m's config, tabulated once per sequence
// length: every attention block of a forward pass (and every batch of equal-length sequences) reuses
// it, so running layers allocates no table. The config must not change while m is used.
func (m *Model) ropeFor(t int) *ropeTable {
	if m.rope == nil || m.rope.t != t {
		m.rope = newRoPE(&m.Cfg, t)
	}
	return m.rope
}

// newRoPE tabulates the rotations of positions 0..t-1 as ggml_rope_cache_init does: theta starts at the
// position and is multiplied by base^(-2/RopeDim) per pair, divided by the pair's frequency factor and
// scaled by RopeFreqScale. With RopeSections (IMROPE, ggml_mrope_cache_init for text: the t, h and w
// positions are the token's, e is 0) a pair whose section is e is not rotated.
func newRoPE(c *Config, t int) *ropeTable {
	half := c.RopeDim / 2
	r := &ropeTable{neox: c.RopeNeox, dim: c.RopeDim, t: t, cos: make([]float32, t*half), sin: make([]float32, t*half)}
	thetaScale := float32(math.Pow(float64(c.RopeBase), -2.0/float64(c.RopeDim)))
	for p := 0; p < t; p++ {
		theta := float32(p) // ggml_rope_cache_init: theta starts at the position and is scaled per pair
		for i := 0; i < half; i++ {
			th := theta
			if c.RopeSections != nil && imropeSectionE(c.RopeSections, i) {
				th = 0
			}
			if c.RopeFreqFactors != nil {
				th /= c.RopeFreqFactors[i]
			}
			a := float64(c.RopeFreqScale * th)
			r.cos[p*half+i] = float32(math.Cos(a))
			r.sin[p*half+i] = float32(math.Sin(a))
			theta *= thetaScale
		}
	}
	return r
}

// imropeSectionE reports whether pair i takes the e position in ggml's interleaved multi-section RoPE:
// with sector = i mod Σsections, sectors ≡ 1 (mod 3) below 3·sections[1] take h, ≡ 2 below
// 3·sections[2] take w, ≡ 0 below 3·sections[0] take t, and every other sector e.
func imropeSectionE(sections []int, i int) bool {
	sector := i % (sections[0] + sections[1] + sections[2] + sections[3])
	switch sector % 3 {
	case 1:
		return sector >= 3*sections[1]
	case 2:
		return sector >= 3*sections[2]
	}
	return sector >= 3*sections[0]
}

// apply rotates the first dim values of each of heads heads of hd values in every row of x.
func (r *ropeTable) apply(x []float32, heads, hd int) {
	half := r.dim / 2
	w := heads * hd
	for p := 0; p*w < len(x); p++ {
		cs, sn := r.cos[p*half:(p+1)*half], r.sin[p*half:(p+1)*half]
		for h := 0; h < heads; h++ {
			v := x[p*w+h*hd : p*w+(h+1)*hd]
			for i := 0; i < half; i++ {
				a, b := 2*i, 2*i+1
				if r.neox {
					a, b = i, i+half
				}
				x0, x1 := v[a], v[b]
				if r.fma {
					v[a] = fma32(x0, cs[i], -(x1 * sn[i]))
					v[b] = fma32(x0, sn[i], x1*cs[i])
					continue
				}
				v[a] = x0*cs[i] - x1*sn[i]
				v[b] = x0*sn[i] + x1*cs[i]
			}
		}
	}
}
