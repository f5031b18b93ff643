package quant

import (
	"fmt"
	"math"
	"runtime"
)

// DefaultClipGrid is the board project's weight clip grid: shrink factors 1.0 down to 0.78125 in
// steps of 0.03125.
var DefaultClipGrid = []float64{1, 0.96875, 0.9375, 0.90625, 0.875, 0.84375, 0.8125, 0.78125}

// config collects the options of RTN and GPTQ. Build it with newConfig.
type config struct {
	bits, group  int
	clipGrid     []float64
	rotate       bool
	signs        bool
	seed         uint64
	workers      int
	blockSize    int
	percDamp     float64
	dampStep     float64
	dampTries    int
	actOrder     bool
	staticGroups bool
	consumeH     bool
	hChecked     bool // hessianChecked: the caller validated the Hessian
	scaleSearch  ScaleSearch
	negScales    bool
	minBlock     int
	rotSearch    int
	refit        int           // WithScaleRefit rounds; 0: off
	refitSteps   int           // WithScaleRefit's conjugate-gradient steps a row
	inputs       *inputsConfig // WithQuantizedInputs; nil: float inputs
}

// Option configures RTN and GPTQ. Each option validates its own argument.
type Option func(*config) error

func newConfig(opts []Option) (*config, error) {
	c := &config{
		bits: 4, group: 32, clipGrid: DefaultClipGrid, workers: runtime.GOMAXPROCS(0),
		blockSize: 128, percDamp: 0.01, dampStep: 0.01, dampTries: 8, minBlock: MinBlock, rotSearch: 1,
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if c.staticGroups && c.group == 0 {
		return nil, fmt.Errorf("static groups need a group size: %w", ErrParam)
	}
	if c.refit > 0 && c.actOrder {
		return nil, fmt.Errorf("scale refit with act-order: %w (the refit works in natural column order)", ErrParam)
	}
	if c.scaleSearch == ScaleSearchGPTQ && (c.group == 0 || c.staticGroups || c.actOrder) {
		return nil, fmt.Errorf("scale search gptq needs dynamic groups (a group size, no static groups, no act-order): %w", ErrParam)
	}
	return c, nil
}

// scaleFactors returns the signed shrink factors the scale search tries: the clip grid, then (with
// negative scales, 4-bit codes only: int8's code range is symmetric, so a negated scale never does
// better) the same factors negated. A negative scale s maps the group's value of largest magnitude
// to the other end of the code range: with [-8, 7] and factor f, x = ±amax has code ∓7/f, so the
// 16th code (-8) can hold whichever sign of the extreme value the group has.
func (c *config) scaleFactors() []float64 {
	if !c.negScales || c.bits != 4 {
		return c.clipGrid
	}
	f := make([]float64, 0, 2*len(c.clipGrid))
	f = append(f, c.clipGrid...)
	for _, v := range c.clipGrid {
		f = append(f, -v)
	}
	return f
}

// WithBits sets the code width: 4 (default) or 8.
func WithBits(bits int) Option {
	return func(c *config) error {
		if err := checkBitsGroup(bits, 0); err != nil {
			return err
		}
		c.bits = bits
		return nil
	}
}

// WithGroup sets the group size along K: 0 (per output channel), 32 (default), 64, 128, 256, 512.
func WithGroup(group int) Option {
	return func(c *config) error {
		if err := checkBitsGroup(4, group); err != nil {
			return err
		}
		c.group = group
		return nil
	}
}

// WithClipGrid sets the shrink factors the clip search tries (each in (0, 1], at least one).
// Pass []float64{1} to disable clipping.
func WithClipGrid(grid []float64) Option {
	return func(c *config) error {
		if len(grid) == 0 {
			return fmt.Errorf("clip grid is empty: %w (want at least one factor)", ErrParam)
		}
		for _, f := range grid {
			if !(f > 0 && f <= 1) || math.IsNaN(f) {
				return fmt.Errorf("clip factor %v: %w (want 0 < f <= 1)", f, ErrParam)
			}
		}
		c.clipGrid = append([]float64(nil), grid...)
		return nil
	}
}

// WithRotation rotates the weight (and the Hessian) along K before quantizing, with the
// Rotation NewRotation(K, seed, signs) builds. signs=false uses no random signs (seed unused).
func WithRotation(signs bool, seed uint64) Option {
	return func(c *config) error {
		c.rotate, c.signs, c.seed = true, signs, seed
		return nil
	}
}

// WithRotationMinBlock makes the rotation's Hadamard blocks at least b values long (NewRotationMinBlock;
// default MinBlock, NewRotation's rotation).
func WithRotationMinBlock(b int) Option {
	return func(c *config) error {
		if b < MinBlock || b&(b-1) != 0 {
			return fmt.Errorf("rotation minimum block %d: %w (want a power of two >= %d)", b, ErrParam, MinBlock)
		}
		c.minBlock = b
		return nil
	}
}

// MaxRotationSearch bounds WithRotationSearch: each seed costs one GPTQ run.
const MaxRotationSearch = 64

// SearchSeed returns the i-th rotation seed WithRotationSearch tries from seed: seed itself for i = 0,
// then seed XOR i·0x9E3779B97F4A7C15.
func SearchSeed(seed uint64, i int) uint64 {
	if i == 0 {
		return seed
	}
	return seed ^ uint64(i)*0x9E3779B97F4A7C15
}

// SearchVersion names the arithmetic of WithRotationSearch's scores, for keys
// (stages.FinalizeParams): 1 formed E·H, a general product (2·N·K² flops a seed), with the whole
// Hessian rotated for each trial's clip weights; 2 sums H∘EᵀE over panels of EᵀE's lower part
// (N·K²) and takes the rotated diag(H) from H's diagonal blocks (bit for bit the same weights);
// 3 (this one) forms those panels in float32 (seedScorer: half the time, half the memory). The
// scores are the same up to rounding, which could still order two nearly equal seeds the other way.
const SearchVersion = 3

// WithRotationSearch makes GPTQ of a signed rotation (WithRotation(true, seed)) try n sign seeds,
// SearchSeed(seed, 0..n-1): each is scored by the calibrated output error tr((W-Q)·H·(W-Q)ᵀ)
// (HessianError) of the weight RTN gives with it (clip search weighted by diag(H)), and GPTQ runs
// once, with the best (ties keep the earlier seed). n = 1 (default) is the seed alone. Scoring by
// RTN chose seeds as good as scoring a GPTQ run per seed (docs/recipes.md) at a fraction of the cost.
func WithRotationSearch(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxRotationSearch {
			return fmt.Errorf("rotation search of %d seeds: %w (want 1..%d)", n, ErrParam, MaxRotationSearch)
		}
		c.rotSearch = n
		return nil
	}
}

// WithWorkers bounds the goroutines a call uses (default GOMAXPROCS).
func WithWorkers(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("workers %d: %w (want >= 1)", n, ErrParam)
		}
		c.workers = n
		return nil
	}
}

// WithBlockSize sets GPTQ's lazy-batch block size (default 128).
func WithBlockSize(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("GPTQ block size %d: %w (want >= 1)", n, ErrParam)
		}
		c.blockSize = n
		return nil
	}
}

// WithDamping sets GPTQ's damping: percdamp (default 0.01) times mean(diag H) is added to the
// diagonal; when a Cholesky factorisation fails, percdamp grows by step (default 0.01), at most
// tries times (default 8) before GPTQ gives up with ErrCholesky.
func WithDamping(percdamp, step float64, tries int) Option {
	return func(c *config) error {
		if !(percdamp >= 0) || !(step > 0) || tries < 1 || math.IsInf(percdamp, 0) || math.IsInf(step, 0) {
			return fmt.Errorf("damping %v step %v tries %d: %w (want percdamp >= 0, step > 0, tries >= 1)", percdamp, step, tries, ErrParam)
		}
		c.percDamp, c.dampStep, c.dampTries = percdamp, step, tries
		return nil
	}
}

// WithActOrder makes GPTQ quantize columns in order of decreasing diag(H).
func WithActOrder(on bool) Option {
	return func(c *config) error { c.actOrder = on; return nil }
}

// keepHessian undoes WithConsumeHessian: the caller's Hessian is read, never modified.
func keepHessian() Option {
	return func(c *config) error { c.consumeH = false; return nil }
}

// hessianChecked tells RTN and GPTQ that the caller has validated the Hessian (Hessian.Validate,
// K² reads) and it has not changed since: a rotation search's trials and its final GPTQ skip it.
func hessianChecked() Option {
	return func(c *config) error { c.hChecked = true; return nil }
}

// WithConsumeHessian lets GPTQ factorize (and, for a rotated weight, rotate) the caller's Hessian
// data in place instead of a copy, saving one K x K float64 buffer (2.26 GiB at K = 17408). The
// caller must not use the Hessian afterwards. A rotation that pads K still needs a new buffer.
func WithConsumeHessian() Option {
	return func(c *config) error { c.consumeH = true; return nil }
}

// ScaleSearch names how a group's scale is chosen among the candidates of the clip grid.
type ScaleSearch int

const (
	// ScaleSearchWeighted (default) picks the candidate with the least squared error of the group's
	// values, weighted by diag(H) (or the importance; unweighted without either).
	ScaleSearchWeighted ScaleSearch = iota
	// ScaleSearchGPTQ (GPTQ, dynamic groups only) picks the candidate with the least GPTQ loss over
	// the group: the group's columns quantized in order, each one's error pushed onto the later
	// columns of the group through the factor U of H⁻¹ as GPTQ does, the loss Σ (err_k / U_kk)². It
	// sees the off-diagonal Hessian within the group that diag(H) ignores.
	ScaleSearchGPTQ
)

// WithScaleSearch sets how GPTQ chooses each group's scale (default ScaleSearchWeighted); RTN
// accepts only ScaleSearchWeighted.
func WithScaleSearch(s ScaleSearch) Option {
	return func(c *config) error {
		if s != ScaleSearchWeighted && s != ScaleSearchGPTQ {
			return fmt.Errorf("scale search %d: %w (want weighted or gptq)", s, ErrParam)
		}
		c.scaleSearch = s
		return nil
	}
}

// WithNegativeScales lets the scale search of 4-bit weights also try each clip factor negated (see
// config.scaleFactors), so that a group's largest-magnitude value may take code -8 whatever its
// sign (llama.cpp's Q4_0 does the same: d = max/-8 with max the signed value of largest magnitude).
// Packs hold any finite float32 scale (docs/orkpack.md 2.3). Ties keep the positive scale.
func WithNegativeScales(on bool) Option {
	return func(c *config) error { c.negScales = on; return nil }
}

// WithStaticGroups makes GPTQ fix every group's scale from the original weights before any
// update (needs a group size; with act-order, a column keeps its natural group).
func WithStaticGroups(on bool) Option {
	return func(c *config) error { c.staticGroups = on; return nil }
}
