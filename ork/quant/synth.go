package quant

import (
	"fmt"
	"math"
)

// SpikedActivations returns a deterministic synthetic activation set of tokens rows of k values:
// standard normal entries, with 1% of the feature channels (at least one, picked by the seed)
// multiplied by 10 — the channel-wise outliers of LLM activations that make per-token activation
// quantization hard. The same (tokens, k, seed) always gives the same values.
func SpikedActivations(tokens, k int, seed uint64) (Matrix, error) {
	if tokens <= 0 || k <= 0 {
		return Matrix{}, fmt.Errorf("spiked activations %d x %d: %w (want positive)", tokens, k, ErrShape)
	}
	g := newRNG(seed ^ 0x5a17ed)
	scale := make([]float32, k)
	for i := range scale {
		scale[i] = 1
	}
	nOut := max(1, k/100)
	for picked := 0; picked < nOut; {
		c := int(g.next() % uint64(k))
		if scale[c] == 1 {
			scale[c] = 10
			picked++
		}
	}
	m := Matrix{Name: fmt.Sprintf("spiked-activations[%dx%d,seed=%d]", tokens, k, seed), Rows: tokens, Cols: k, Data: make([]float32, tokens*k)}
	for t := 0; t < tokens; t++ {
		for j := 0; j < k; j++ {
			m.Data[t*k+j] = float32(g.norm()) * scale[j]
		}
	}
	return m, nil
}

// CorrelatedActivations returns tokens rows of k values with correlated features: each row is
// x = z·A/sqrt(rank) for standard normal z (1 x rank, rank = K/2, drawn from seed) and a fixed
// random mixing A (rank x k, the same for every seed, so two seeds give two samples of one
// distribution: a calibration set and a held-out set), plus 0.3 x the spiked independent noise of SpikedActivations (so the outlier
// channels stay). It gives a Hessian with strong off-diagonal structure, like real activations.
func CorrelatedActivations(tokens, k int, seed uint64) (Matrix, error) {
	base, err := SpikedActivations(tokens, k, seed)
	if err != nil {
		return Matrix{}, err
	}
	rank := max(4, k/2)
	gm := newRNG(uint64(k) ^ 0xc0441) // the mixing depends on k only: sets of one width share it
	mix := make([]float64, rank*k)
	for i := range mix {
		mix[i] = gm.norm()
	}
	g := newRNG(seed ^ 0x2a3b)
	z := make([]float64, rank)
	norm := 1 / math.Sqrt(float64(rank))
	for t := 0; t < tokens; t++ {
		for r := range z {
			z[r] = g.norm()
		}
		row := base.Data[t*k : (t+1)*k]
		for j := range row {
			s := 0.0
			for r, zr := range z {
				s += zr * mix[r*k+j]
			}
			// keep the spike pattern: base carries the channel scale (1 or 10) times noise
			row[j] = float32(s*norm + 0.3*float64(row[j]))
		}
	}
	base.Name = fmt.Sprintf("correlated-activations[%dx%d,seed=%d]", tokens, k, seed)
	return base, nil
}

// SyntheticWeight returns a deterministic LLM-like weight of n rows and k columns: heavy-tailed
// entries (Student-t with 4 degrees of freedom, scaled to std about 0.02), a few input channels
// (0.5% of K, at least one) scaled by 4 and a few output channels (0.5% of N) scaled by 3 —
// the outlier structure that per-channel scales handle badly. Use it for wide weights (e.g.
// K = 5120) that no test model provides.
func SyntheticWeight(name string, n, k int, seed uint64) (Matrix, error) {
	if n <= 0 || k <= 0 {
		return Matrix{}, fmt.Errorf("%s: synthetic weight %d x %d: %w (want positive)", name, n, k, ErrShape)
	}
	g := newRNG(seed ^ 0x3e16)
	colScale := outlierScales(g, k, 4)
	rowScale := outlierScales(g, n, 3)
	const nu = 4
	norm := 0.02 / math.Sqrt(nu/(nu-2.0))
	m := Matrix{Name: name, Rows: n, Cols: k, Data: make([]float32, n*k)}
	for r := 0; r < n; r++ {
		for c := 0; c < k; c++ {
			chi := 0.0
			for i := 0; i < nu; i++ {
				v := g.norm()
				chi += v * v
			}
			tv := g.norm() / math.Sqrt(chi/nu)
			m.Data[r*k+c] = float32(tv * norm * colScale[c] * rowScale[r])
		}
	}
	return m, nil
}

func outlierScales(g *rng, n int, factor float64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = 1
	}
	for picked, want := 0, max(1, n/200); picked < want; {
		c := int(g.next() % uint64(n))
		if s[c] == 1 {
			s[c] = factor
			picked++
		}
	}
	return s
}
