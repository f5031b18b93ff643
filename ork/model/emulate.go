package model

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"orkpipe/ork/internal/checked"
	"orkpipe/ork/pack"
	"orkpipe/ork/quant"
)

// Emulated is a Linear computing y = W·x for a pack entry with the board's arithmetic (docs/orkpack.md
// 2.4): the activation row (K values) is zero-padded and rotated when the entry is rotated, quantized per
// token to the entry's activation width (symmetric, scale = ActClip·amax/qmax with the entry's activation
// clip), multiplied with the weight codes as int32 dot products per scale group, and scaled
// (quant.MatMulInt). F16 entries round activations and weights to binary16 and accumulate in float32.
type Emulated struct {
	Name string
	K    int           // logical input width (the model's)
	W    *quant.Weight // codes [N][KP] (nil once packed into panels) and scales; nil for F16
	F16  []float32     // F16 entries: the binary16 weights as float32, [N][K]
	N    int
	// ActBits is 4 or 8 (16 for F16). ActClip is the entry's activation clip ratio in (0, 1] (1: none;
	// every entry of a version-1 pack).
	ActBits int
	ActClip float64
	// Workers bounds the goroutines one Apply runs on (0: EmulationWorkers; never more than
	// EmulationWorkers nor GOMAXPROCS). The outputs do not depend on it: every value is computed whole
	// by one goroutine.
	Workers int
	// panels is W's codes laid out once for the integer matmul's panel kernel (quant.PackPanels),
	// where it takes W: an Apply then multiplies without repacking them (the same values).
	panels *quant.Panels
}

// NewEmulated builds the emulation of a decoded pack entry for a model input of logicalK values. Where
// the integer matmul takes the entry to a panel kernel, its codes are packed for it once, on every
// core, and w's codes are no longer referenced (quant.PanelBytes: about the codes' size again while
// they are packed).
func NewEmulated(ctx context.Context, w pack.Weight, logicalK int) (*Emulated, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("pack entry %s: %s: %w", w.Name, fmt.Sprintf(format, a...), ErrBadModel)
	}
	e := &Emulated{Name: w.Name, K: logicalK, N: w.N, ActBits: w.ActBits, ActClip: float64(w.ActClip)}
	if w.ActClip == 0 {
		e.ActClip = quant.DefaultActClip // a Meta not validated by the pack reader
	}
	if e.ActBits == 0 {
		e.ActBits = w.DType.DefaultActBits()
	}
	if w.DType == pack.F16 {
		if w.K != logicalK {
			return nil, bad("F16 entry has K = %d, the model's input has %d", w.K, logicalK)
		}
		e.F16 = make([]float32, len(w.F16))
		for i, h := range w.F16 {
			e.F16[i] = pack.HalfToFloat(h)
		}
		e.ActBits = 16
		return e, nil
	}
	qw := &quant.Weight{N: w.N, K: logicalK, KP: w.K, Bits: 8, Group: w.Group, Codes: w.Codes, Scales: w.Scales}
	if w.DType.Int4() {
		qw.Bits = 4
	}
	switch w.Rotation.Kind {
	case pack.RotNone:
		if w.K != logicalK {
			return nil, bad("unrotated entry has K = %d, the model's input has %d", w.K, logicalK)
		}
	case pack.RotHadamard, pack.RotHadamardUnsigned:
		qw.Rotation = quant.Rotation{K: logicalK, Padded: w.K, Block: w.Rotation.Block,
			Signs: w.Rotation.Kind == pack.RotHadamard, Seed: w.Rotation.Seed}
	default:
		return nil, bad("rotation %s is not emulated", w.Rotation)
	}
	if err := qw.Validate(); err != nil {
		return nil, fmt.Errorf("pack entry %s: %w", w.Name, err)
	}
	if e.ActBits != 4 && e.ActBits != 8 {
		return nil, bad("activation width %d: want 4 or 8", e.ActBits)
	}
	e.W = qw
	p, err := quant.PackPanels(ctx, qw, runtime.GOMAXPROCS(0))
	if err != nil {
		return nil, fmt.Errorf("pack entry %s: %w", w.Name, err)
	}
	if p != nil {
		e.panels, qw.Codes = p, nil
	}
	return e, nil
}

// Dims implements Linear.
func (e *Emulated) Dims() (int, int) { return e.N, e.K }

// Apply implements Linear.
func (e *Emulated) Apply(y, x []float32) error {
	if err := checkApply(y, x, e.N, e.K); err != nil {
		return fmt.Errorf("%s: %w", e.Name, err)
	}
	t := len(x) / e.K
	if e.F16 != nil {
		e.applyF16(y, x, t)
		return nil
	}
	workers := min(emulationWorkers(e.Workers), runtime.GOMAXPROCS(0))
	xr := x
	if !e.W.Rotation.IsZero() {
		// The rotated rows in a pooled buffer (t·KP values: 35 MB for a 512-token batch into a 27B
		// ffn_down), not fresh pages every Apply.
		p := getScratch(t * e.W.KP)
		defer scratchPool.Put(p)
		xr = *p
		if err := e.W.Rotation.ApplyRows(xr, x, t, workers); err != nil {
			return fmt.Errorf("%s: rotate activations: %w", e.Name, err)
		}
	}
	a, err := quant.QuantizeActivationsOn(xr, t, e.W.KP, e.ActBits, e.ActClip, workers)
	if err != nil {
		return fmt.Errorf("%s: %w", e.Name, err)
	}
	if e.panels != nil {
		err = quant.MatMulIntPacked(context.Background(), a, e.panels, y, workers)
	} else {
		err = quant.MatMulInt(context.Background(), a, e.W, y, workers)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", e.Name, err)
	}
	return nil
}

func (e *Emulated) applyF16(y, x []float32, t int) {
	xh := make([]float32, len(x))
	for i, v := range x {
		xh[i] = pack.HalfToFloat(quant.FP32ToFP16(v))
	}
	k, n := e.K, e.N
	parallelRows(n, n*k*t, min(emulationWorkers(e.Workers), runtime.GOMAXPROCS(0)), func(r0, r1 int) {
		for i := r0; i < r1; i++ {
			w := e.F16[i*k : (i+1)*k]
			for tt := 0; tt < t; tt++ {
				y[tt*n+i] = dot(w, xh[tt*k:(tt+1)*k])
			}
		}
	})
}

// Shaper is implemented by weight sources that know a matrix's shape without reading it.
type Shaper interface {
	// Shape returns K (inputs) and N (outputs) of a two-dimensional tensor; ok is false if absent.
	Shape(name string) (k, n int, ok bool)
}

// Shape implements Shaper; an expert slice name "<tensor>#<e>" has the shape of one expert of a
// three-dimensional tensor [K, N, n_expert].
func (s *GGUFSource) Shape(name string) (int, int, bool) {
	base, e, isExpert, err := splitExpert(name)
	if err != nil {
		return 0, 0, false
	}
	t, err := s.f.Tensor(base)
	switch {
	case err != nil:
		return 0, 0, false
	case isExpert && (len(t.Shape) != 3 || int64(e) >= t.Shape[2]):
		return 0, 0, false
	case !isExpert && len(t.Shape) != 2:
		return 0, 0, false
	}
	return int(t.Shape[0]), int(t.Shape[1]), true
}

// PackSource is a WeightSource whose matmul weights come from an orkpack, emulated as the board
// computes them, and everything else (norms, embeddings, weights the pack does not own) from Float.
type PackSource struct {
	Float interface {
		WeightSource
		Shaper
	}
	Pack *pack.Reader
}

// NewPackSource checks that every pack entry names a two-dimensional tensor of float with the same
// number of rows (a pack built for another model is refused), and returns the source.
func NewPackSource(float interface {
	WeightSource
	Shaper
}, p *pack.Reader) (*PackSource, error) {
	es := p.Entries()
	if len(es) == 0 {
		return nil, fmt.Errorf("pack has no entries: %w", ErrBadModel)
	}
	for _, e := range es {
		k, n, ok := float.Shape(e.Name)
		if !ok {
			return nil, fmt.Errorf("pack entry %s: the model has no such matrix: %w", e.Name, ErrBadModel)
		}
		if n != e.N || (e.Rotation.Kind == pack.RotNone && k != e.K) || k > e.K {
			return nil, fmt.Errorf("pack entry %s: %d rows of %d, the model's tensor has %d rows of %d: %w", e.Name, e.N, e.K, n, k, ErrBadModel)
		}
	}
	return &PackSource{Float: float, Pack: p}, nil
}

// EmulationWorkers is the most goroutines one Apply of an Emulated runs on, whatever GOMAXPROCS is:
// the scratch it takes grows with them (EmulationBytes), and a node's declared memory counts this many
// (EmulationBytes with workers 0), so the declaration does not depend on the CPUs of the machine that
// planned the build, and a run on more CPUs stays within it. Fewer CPUs run fewer goroutines (the
// declaration then covers more than they take). The outputs do not depend on the count. 64, not
// fewer: a 27B build's propagate and screen spend their time in these products, and a build host of
// up to 64 cores runs them on all of its cores; the cost is small beside a 27B node's declaration
// (an I4_ROT_A8 entry of KP 17408 on 512 tokens: 92.5 MB at 64 goroutines, 59.1 MB at 16).
const EmulationWorkers = 64

// emulationWorkers is the goroutines an Apply asked for w (Emulated.Workers) runs on before GOMAXPROCS
// caps them: w, EmulationWorkers for 0 or more.
func emulationWorkers(w int) int {
	if w <= 0 || w > EmulationWorkers {
		return EmulationWorkers
	}
	return w
}

// EmulationBytes is the scratch one Apply of an emulated integer pack entry m (K its padded K, kp) takes
// for t tokens at once on workers goroutines (Emulated.Workers; 0 and more than EmulationWorkers count
// EmulationWorkers, the most an Apply runs on, not GOMAXPROCS: the figure is the same on every
// machine, and covers an Apply on any number of CPUs): the activation rows'
// quantized codes and scales (t·kp int8, t float32) and what quantizing and multiplying them allocate
// (quant.ProductScratchBytes); for a rotated entry also the rotated rows (t·kp float32) and the
// rotation's scratch on each goroutine rotating them (quant.Rotation.ScratchBytes, on
// quant.ApplyRowsWorkers of them). ok is false when it overflows int64. The entry's own codes and
// scales (N·kp) are not in it.
func EmulationBytes(m pack.Meta, t, workers int) (n int64, ok bool) {
	workers = emulationWorkers(workers)
	kp := m.K
	vals, ok := checked.Mul(int64(t), int64(kp))
	per := int64(1) // an int8 code a value
	rotated := m.Rotation.Kind != pack.RotNone
	if rotated {
		per += 4 // and its float32 rotated value
	}
	n, ok2 := checked.Mul(vals, per)
	n, ok3 := checked.Add(n, 4*int64(t))
	product, ok4 := quant.ProductScratchBytes(t, kp, m.N, m.Group, workers)
	n, ok5 := checked.Add(n, product)
	ok = ok && ok2 && ok3 && ok4 && ok5
	if rotated {
		r := quant.Rotation{K: kp, Padded: kp, Block: m.Rotation.Block}
		scratch, ok1 := r.ScratchBytes()
		all, ok2 := checked.Mul(scratch, int64(quant.ApplyRowsWorkers(t, workers)))
		n, ok3 = checked.Add(n, all)
		ok = ok && ok1 && ok2 && ok3
	}
	if !ok {
		return 0, false
	}
	return n, true
}

// CheckEmulationMemory refuses, before any entry is read, a pack with an entry whose emulation on
// the most tokens one Apply of it takes — expertTokens for a routed expert's slice (an entry
// "<tensor>#<e>": Config.EvalExpertTokens, as an evaluation may hand an expert the tokens of several
// chunks at once), tokens (a chunk) for any other — on EmulationWorkers goroutines, the most Linear's
// Emulated runs it on, would need more than budget bytes of scratch (EmulationBytes), with an ErrOverBudget error naming
// the entry, the tokens, its padded and the model's K and the budget. A pack may pad a
// rotated entry's K to any power-of-two Hadamard block up to 2^24 (the block must divide it), so an
// entry of the model's K = 64 can carry a padded K of 2^24, and a 512-token chunk of it would need
// 40 GiB of activations: far past the memory, where any real entry (a padded K within 32 of the
// model's) needs a few tens of MB.
func (s *PackSource) CheckEmulationMemory(tokens, expertTokens int, budget int64) error {
	for _, e := range s.Pack.Entries() {
		if e.DType == pack.F16 {
			continue
		}
		t := tokens
		if _, _, expert := pack.SplitExpert(e.Name); expert {
			t = expertTokens
		}
		rotated := e.Rotation.Kind != pack.RotNone
		need, ok := EmulationBytes(e.Meta, t, 0) // Linear's Emulated runs on at most EmulationWorkers goroutines
		if ok && need <= budget {
			continue
		}
		k, _, _ := s.Float.Shape(e.Name)
		what := fmt.Sprintf("%d bytes", need)
		if !ok {
			what = "more bytes than an int64 counts"
		}
		width := fmt.Sprintf("K = %d", e.K)
		if rotated {
			width = fmt.Sprintf("the model's K = %d padded to KP = %d by its rotation %s", k, e.K, e.Rotation)
		}
		return fmt.Errorf("pack entry %s: emulating it on %d tokens at once needs %s of scratch (activations of %d values a token: %s; and what rotating, quantizing and multiplying them take), more than the memory budget of %d bytes: %w",
			e.Name, t, what, e.K, width, budget, ErrOverBudget)
	}
	return nil
}

// Vector implements WeightSource.
func (s *PackSource) Vector(ctx context.Context, name string) ([]float32, bool, error) {
	return s.Float.Vector(ctx, name)
}

// Rows implements WeightSource (embedding lookups always come from the float model).
func (s *PackSource) Rows(ctx context.Context, name string, rows []int32, dst []float32) error {
	return s.Float.Rows(ctx, name, rows, dst)
}

// Linear implements WeightSource: the pack's entry when it has one (verified against its BLAKE3 as it
// is read), else the float weight.
func (s *PackSource) Linear(ctx context.Context, name string) (Linear, bool, error) {
	if _, err := s.Pack.Entry(name); errors.Is(err, pack.ErrNotFound) {
		return s.Float.Linear(ctx, name)
	} else if err != nil {
		return nil, false, err
	}
	w, err := s.Pack.Load(ctx, name)
	if err != nil {
		return nil, false, err
	}
	k, _, _ := s.Float.Shape(name)
	e, err := NewEmulated(ctx, w, k)
	if err != nil {
		return nil, false, err
	}
	return e, true, nil
}
