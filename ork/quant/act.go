package quant

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
)

// DefaultActClip is the default activation clip ratio (QuaRot uses 0.9).
const DefaultActClip = 1.0

// Activations are per-token quantized activation rows: value = code · Scales[token]. K is the
// row length the weight expects (the padded KP of a rotated weight: rotate and pad the float
// rows with the weight's Rotation before quantizing).
type Activations struct {
	M, K   int
	Bits   int
	Codes  []int8    // [M][K]
	Scales []float32 // [M]
}

// QuantizeActivations quantizes x (m rows of k values) per row, symmetric, to bits 4 or 8 with
// scale = clip·amax/qmax (clip in (0, 1]); int4 codes clamp to [-8, 7], int8 to [-127, 127]. It is
// QuantizeActivationsOn on GOMAXPROCS goroutines.
func QuantizeActivations(x []float32, m, k, bits int, clip float64) (*Activations, error) {
	return QuantizeActivationsOn(x, m, k, bits, clip, runtime.GOMAXPROCS(0))
}

// QuantizeActivationsOn is QuantizeActivations with the rows on up to workers goroutines (at least
// one) when there are at least 65536 values, on one below; each holds a float64 copy of a row
// (ProductScratchBytes). The values do not depend on workers.
func QuantizeActivationsOn(x []float32, m, k, bits int, clip float64, workers int) (*Activations, error) {
	if bits != 4 && bits != 8 {
		return nil, fmt.Errorf("activation bits %d: %w (want 4 or 8)", bits, ErrParam)
	}
	if !(clip > 0 && clip <= 1) {
		return nil, fmt.Errorf("activation clip %v: %w (want 0 < clip <= 1)", clip, ErrParam)
	}
	if m <= 0 || k <= 0 || len(x) != m*k {
		return nil, fmt.Errorf("activations: %d values for %d x %d: %w", len(x), m, k, ErrShape)
	}
	a := &Activations{M: m, K: k, Bits: bits, Codes: make([]int8, m*k), Scales: make([]float32, m)}
	// Rows on every core (each row's scale and codes depend on that row only), the codes by
	// quantCodes' kernels. A worker stops at its first row with a value not finite; the error is the
	// first such row's (and its first such value's), as a loop over the rows in order would report it.
	lo, hi := codeRange(bits)
	if m*k < 1<<16 {
		workers = 1
	}
	workers = max(workers, 1)
	var mu sync.Mutex
	bad, badCol := m, 0
	forRows(context.Background(), m, workers, func(r0, r1 int) {
		buf := make([]float64, k)
		for t := r0; t < r1; t++ {
			amax := 0.0
			for j, v := range x[t*k : (t+1)*k] {
				f := float64(v)
				if math.IsNaN(f) || math.IsInf(f, 0) {
					mu.Lock()
					if t < bad {
						bad, badCol = t, j
					}
					mu.Unlock()
					return
				}
				amax = max(amax, math.Abs(f)) // finite: the same as math.Max
				buf[j] = f
			}
			s := float32(clip * amax / qmax(bits))
			a.Scales[t] = s
			if s != 0 {
				quantCodes(a.Codes[t*k:(t+1)*k], buf, 1/float64(s), float64(lo), float64(hi))
			}
		}
	})
	if bad < m {
		return nil, fmt.Errorf("activation row %d col %d is %v: %w", bad, badCol, x[bad*k+badCol], ErrNotFinite)
	}
	return a, nil
}

// Dequantize returns code·scale, [M][K].
func (a *Activations) Dequantize() []float32 {
	out := make([]float32, len(a.Codes))
	for t := 0; t < a.M; t++ {
		s := a.Scales[t]
		for j, c := range a.Codes[t*a.K : (t+1)*a.K] {
			out[t*a.K+j] = float32(c) * s
		}
	}
	return out
}

// MatMulInt computes out[t][n] = Σ_groups float32(int32 dot(a_t, w_n over the group)) ·
// wscale[n][g], summed in float32 in group order, times ascale[t] — the board's arithmetic.
// out is [M][N]. Rows of w are split across at most workers goroutines.
func MatMulInt(ctx context.Context, a *Activations, w *Weight, out []float32, workers int) error {
	if a.K != w.KP {
		return fmt.Errorf("matmul: activations have K=%d, weight stores KP=%d: %w", a.K, w.KP, ErrShape)
	}
	if len(out) != a.M*w.N {
		return fmt.Errorf("matmul: out has %d values, want M*N = %d: %w", len(out), a.M*w.N, ErrShape)
	}
	g := effGroup(w.KP, w.Group)
	ng := w.Groups()
	kp := w.KP
	if ng*g == kp && kp > 0 {
		if kind := panelPath(g); kind != noPanels {
			return matMulIntPanels(ctx, kind, a, w, out, workers, g)
		}
	}
	return forRows(ctx, w.N, workers, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			wrow := w.Codes[n*kp : (n+1)*kp]
			ws := w.Scales[n*ng : (n+1)*ng]
			for t := 0; t < a.M; t++ {
				arow := a.Codes[t*kp : (t+1)*kp]
				var acc float32
				for gi := 0; gi < ng; gi++ {
					l, h := gi*g, min((gi+1)*g, kp)
					acc += float32(dotInt8(arow[l:h], wrow[l:h])) * ws[gi]
				}
				out[t*w.N+n] = acc * a.Scales[t]
			}
		}
	})
}

// dotInt8 is the int32 dot product of two equal-length int8 vectors. |sum| <= 127·127·len, so it
// cannot overflow int32 for len < 133144 (K per group or per channel is far below that).
func dotInt8(a, b []int8) int32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 int32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += int32(a[i]) * int32(b[i])
		s1 += int32(a[i+1]) * int32(b[i+1])
		s2 += int32(a[i+2]) * int32(b[i+2])
		s3 += int32(a[i+3]) * int32(b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += int32(a[i]) * int32(b[i])
	}
	return s0 + s1 + s2 + s3
}

// MatMul computes out = x·Wᵀ (m x N) for float activation rows x (m x K) the way the board runs
// the weight: rotate and zero-pad x with w.Rotation (when set), quantize per token to abits with
// clip (QuantizeActivations), then MatMulInt. It is the activation-quantization emulation the
// offline evaluator uses for W4A4 / W4A8 / W8A8.
func (w *Weight) MatMul(ctx context.Context, x []float32, m, abits int, clip float64, out []float32, workers int) error {
	if len(x) != m*w.K {
		return fmt.Errorf("matmul: %d activation values for %d rows of K=%d: %w", len(x), m, w.K, ErrShape)
	}
	if !w.Rotation.IsZero() {
		xr := make([]float32, m*w.KP)
		if err := w.Rotation.Apply(xr, x, m); err != nil {
			return err
		}
		x = xr
	}
	a, err := QuantizeActivations(x, m, w.KP, abits, clip)
	if err != nil {
		return err
	}
	return MatMulInt(ctx, a, w, out, workers)
}
