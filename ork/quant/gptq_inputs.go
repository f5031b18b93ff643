package quant

import (
	"context"
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// InputTarget says which error of the weight's output GPTQ minimizes: against float inputs (the
// calibration Hessian, the default) or against the quantized inputs the board will feed it.
type InputTarget int

const (
	// InputsFloat minimizes ‖(W−Q)·X‖ over the float calibration inputs X: H = XᵀX.
	InputsFloat InputTarget = iota
	// InputsQuantized minimizes ‖(W−Q)·X̃‖ over the inputs as the board quantizes them (rotated,
	// clipped, per token to the activation bits): H̃ = X̃ᵀX̃.
	InputsQuantized
	// InputsAsymmetric minimizes ‖W·X − Q·X̃‖: the quantized weight on quantized inputs against the
	// float weight on float inputs (GPTAQ's asymmetric target), i.e. GPTQ with H̃ on the target
	// W* = W − (H̃⁻¹·X̃ᵀ·(X̃−X)·Wᵀ)ᵀ, the unconstrained minimizer of that error.
	InputsAsymmetric
)

// String names the target as recipes spell it.
func (t InputTarget) String() string {
	switch t {
	case InputsFloat:
		return "float"
	case InputsQuantized:
		return "quantized"
	case InputsAsymmetric:
		return "asymmetric"
	}
	return fmt.Sprintf("InputTarget(%d)", int(t))
}

// inputsConfig is WithQuantizedInputs' configuration.
type inputsConfig struct {
	target InputTarget
	x      []float32 // rows x K float inputs, not rotated
	rows   int
	abits  int
	grid   []float64
}

// inputChunk is how many output channels the asymmetric target's correction handles at a time.
const inputChunk = 256

// WithQuantizedInputs makes GPTQ see the activation quantization its weight will meet (target
// InputsQuantized or InputsAsymmetric; InputsFloat turns it off). x holds rows sampled input rows of
// K values (float32, not rotated: GPTQ rotates them with the weight's rotation, the chosen seed's when
// it searches one), drawn from the same calibration rows as the Hessian (h.Tokens of them). Each row
// is quantized per token to abits with the clip ratio chosen from clipGrid (one value: that ratio; more:
// the one whose quantized inputs change the float weight's output on the sample least, summed over
// ActClipChannels(N, DefaultInputClipChannels); ties keep the earlier) — Weight.InputClip reports it.
//
// The Hessian becomes H̃ = H + (Tokens/rows)·(X̃ᵀX̃ − XᵀX): the calibration Hessian with the sample's
// estimate of what quantizing the inputs adds (exactly X̃ᵀX̃ when the sample is every calibration row),
// in place in GPTQ's one KP x KP buffer. The estimate is only as good as the sample: fewer rows than
// KP are refused (ErrParam), and a sample a few times KP can still leave H̃ indefinite (ErrCholesky
// after the damping retries). InputsAsymmetric then moves the target to
// W* = W − (H̃⁻¹·(Tokens/rows)·X̃ᵀ·(X̃−X)·Wᵀ)ᵀ, through the factor U of H̃⁻¹ GPTQ computes anyway (two
// triangular products per chunk of 256 rows): with no quantization error W* = W. Act-order is refused
// (its permutation would have to follow the target). Extra memory: the sample, two float64 copies of
// it (rows·KP·8 each) and per chunk 256·KP·16 bytes (InputsMemory).
func WithQuantizedInputs(target InputTarget, x []float32, rows, abits int, clipGrid []float64) Option {
	return func(c *config) error {
		if target == InputsFloat {
			c.inputs = nil
			return nil
		}
		if target != InputsQuantized && target != InputsAsymmetric {
			return fmt.Errorf("input target %d: %w (want float, quantized or asymmetric)", target, ErrParam)
		}
		if abits != 4 && abits != 8 {
			return fmt.Errorf("quantized inputs of %d bits: %w (want 4 or 8)", abits, ErrParam)
		}
		if rows < 1 || len(x)%rows != 0 || len(x) == 0 {
			return fmt.Errorf("quantized inputs: %d values in %d rows: %w", len(x), rows, ErrShape)
		}
		if len(clipGrid) == 0 {
			return fmt.Errorf("quantized inputs: empty clip grid: %w", ErrParam)
		}
		for _, v := range clipGrid {
			if !(v > 0 && v <= 1) {
				return fmt.Errorf("quantized inputs: clip %v: %w (want 0 < clip <= 1)", v, ErrParam)
			}
		}
		c.inputs = &inputsConfig{target: target, x: x, rows: rows, abits: abits, grid: clipGrid}
		return nil
	}
}

// DefaultInputClipChannels is how many output channels WithQuantizedInputs' clip choice sums over.
const DefaultInputClipChannels = 512

// InputsMemory is what WithQuantizedInputs adds to GPTQMemory for rows sample rows of k values and a
// weight of n rows stored kp wide: the rotated sample (float32), its float and quantized float64
// copies, the float64 rows of the clip choice's channels and their products, and the asymmetric
// target's chunk buffers.
func InputsMemory(n, k, kp, rows int) int64 {
	R, K, KP, N := int64(rows), int64(k), int64(kp), int64(n)
	ch := min(N, DefaultInputClipChannels)
	return R*K*4 + R*KP*4 + 2*R*KP*8 + ch*KP*8 + 2*R*ch*8 + R*min(N, inputChunk)*8 + 2*KP*min(N, inputChunk)*8
}

// inputsState holds the sample as GPTQ uses it: X (rotated, float64) and X̃ (quantized and
// dequantized), rows x KP, and the scale Tokens/rows.
type inputsState struct {
	xr, xq []float64
	rows   int
	scale  float64
	clip   float64
}

// prepare rotates the sample with w's rotation, chooses the clip on the float rotated weight
// data (N x KP) and quantizes the sample with it.
func (ic *inputsConfig) prepare(ctx context.Context, name string, w *Weight, data []float32, tokens int64) (*inputsState, error) {
	k, kp := w.K, w.KP
	if len(ic.x) != ic.rows*k {
		return nil, fmt.Errorf("%s: quantized inputs of %d values in %d rows, the weight has K = %d: %w", name, len(ic.x), ic.rows, k, ErrShape)
	}
	if ic.rows < kp {
		return nil, fmt.Errorf("%s: quantized inputs: a sample of %d rows cannot span the %d values of a stored row (want at least %d rows, several times more for a stable estimate): %w", name, ic.rows, kp, kp, ErrParam)
	}
	if tokens < int64(ic.rows) {
		return nil, fmt.Errorf("%s: the Hessian counts %d tokens, fewer than the %d sample rows drawn from them: %w", name, tokens, ic.rows, ErrParam)
	}
	xr32 := ic.x
	if !w.Rotation.IsZero() {
		xr32 = make([]float32, ic.rows*kp)
		if err := w.Rotation.Apply(xr32, ic.x, ic.rows); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	st := &inputsState{xr: make([]float64, ic.rows*kp), xq: make([]float64, ic.rows*kp), rows: ic.rows,
		scale: float64(tokens) / float64(ic.rows), clip: ic.grid[0]}
	for i, v := range xr32 {
		st.xr[i] = float64(v)
	}
	if len(ic.grid) > 1 {
		if err := st.chooseClip(ctx, name, ic, w, data); err != nil {
			return nil, err
		}
	}
	if err := st.quantize(xr32, kp, ic.abits, st.clip, st.xq); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return st, nil
}

// quantize writes the per-token quantized, dequantized rows of x (float32, rows x kp) into out.
func (st *inputsState) quantize(x []float32, kp, abits int, clip float64, out []float64) error {
	a, err := QuantizeActivations(x, st.rows, kp, abits, clip)
	if err != nil {
		return err
	}
	for t := 0; t < st.rows; t++ {
		s := float64(a.Scales[t])
		for j, c := range a.Codes[t*kp : (t+1)*kp] {
			out[t*kp+j] = float64(c) * s
		}
	}
	return nil
}

// chooseClip sets st.clip to the grid ratio whose quantized inputs change the float weight's output
// least: Σ over the sample's rows and channels ActClipChannels(N, DefaultInputClipChannels) of
// ((X̃_c − X)·wᵀ)².
func (st *inputsState) chooseClip(ctx context.Context, name string, ic *inputsConfig, w *Weight, data []float32) error {
	kp := w.KP
	ch := ActClipChannels(w.N, DefaultInputClipChannels)
	wc := make([]float64, len(ch)*kp)
	for j, n := range ch {
		for i, v := range data[n*kp : (n+1)*kp] {
			wc[j*kp+i] = float64(v)
		}
	}
	x32 := make([]float32, len(st.xr))
	for i, v := range st.xr {
		x32[i] = float32(v)
	}
	e := make([]float64, len(st.xr))
	y := make([]float64, st.rows*len(ch))
	best := math.Inf(1)
	for _, c := range ic.grid {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := st.quantize(x32, kp, ic.abits, c, e); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for i, v := range st.xr {
			e[i] -= v
		}
		blas64.Gemm(blas.NoTrans, blas.Trans, 1,
			blas64.General{Rows: st.rows, Cols: kp, Stride: kp, Data: e},
			blas64.General{Rows: len(ch), Cols: kp, Stride: kp, Data: wc}, 0,
			blas64.General{Rows: st.rows, Cols: len(ch), Stride: len(ch), Data: y})
		var s float64
		for _, v := range y {
			s += v * v
		}
		if s < best {
			best, st.clip = s, c
		}
	}
	return nil
}

// correctHessian turns the KP x KP (full, symmetric) H into H + scale·(X̃ᵀX̃ − XᵀX).
func (st *inputsState) correctHessian(H []float64, kp int) {
	c := blas64.Symmetric{Uplo: blas.Upper, N: kp, Stride: kp, Data: H}
	blas64.Syrk(blas.Trans, st.scale, blas64.General{Rows: st.rows, Cols: kp, Stride: kp, Data: st.xq}, 1, c)
	blas64.Syrk(blas.Trans, -st.scale, blas64.General{Rows: st.rows, Cols: kp, Stride: kp, Data: st.xr}, 1, c)
	for i := 0; i < kp; i++ {
		for j := i + 1; j < kp; j++ {
			H[j*kp+i] = H[i*kp+j]
		}
	}
}

// asymmetricTarget returns W* = W − (H̃⁻¹·scale·X̃ᵀ·(X̃−X)·Wᵀ)ᵀ for the rotated weight data (N x KP),
// with H̃⁻¹ = UᵀU (U upper, row-major, GPTQ's factor). It turns st.xr into X̃−X.
func (st *inputsState) asymmetricTarget(ctx context.Context, data []float32, n, kp int, U []float64) ([]float32, error) {
	for i, v := range st.xq {
		st.xr[i] = v - st.xr[i]
	}
	out := make([]float32, len(data))
	nb := min(n, inputChunk)
	wc := make([]float64, nb*kp)
	p := make([]float64, st.rows*nb)
	y := make([]float64, kp*nb)
	u := blas64.Triangular{Uplo: blas.Upper, Diag: blas.NonUnit, N: kp, Stride: kp, Data: U}
	for lo := 0; lo < n; lo += nb {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := min(nb, n-lo)
		for r := 0; r < c; r++ {
			for i, v := range data[(lo+r)*kp : (lo+r+1)*kp] {
				wc[r*kp+i] = float64(v)
			}
		}
		// P = (X̃−X)·Wcᵀ (rows x c); Y = scale·X̃ᵀ·P (KP x c); Y = Uᵀ·(U·Y)
		blas64.Gemm(blas.NoTrans, blas.Trans, 1,
			blas64.General{Rows: st.rows, Cols: kp, Stride: kp, Data: st.xr},
			blas64.General{Rows: c, Cols: kp, Stride: kp, Data: wc}, 0,
			blas64.General{Rows: st.rows, Cols: c, Stride: nb, Data: p})
		yg := blas64.General{Rows: kp, Cols: c, Stride: nb, Data: y}
		blas64.Gemm(blas.Trans, blas.NoTrans, st.scale,
			blas64.General{Rows: st.rows, Cols: kp, Stride: kp, Data: st.xq},
			blas64.General{Rows: st.rows, Cols: c, Stride: nb, Data: p}, 0, yg)
		blas64.Trmm(blas.Left, blas.NoTrans, 1, u, yg)
		blas64.Trmm(blas.Left, blas.Trans, 1, u, yg)
		for r := 0; r < c; r++ {
			for i := 0; i < kp; i++ {
				out[(lo+r)*kp+i] = float32(wc[r*kp+i] - y[i*nb+r])
			}
		}
	}
	return out, nil
}
