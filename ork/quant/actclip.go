package quant

import (
	"context"
	"fmt"
	"math"
)

// DefaultActClipGrid is the activation clip search's default grid: 1.0 down to 0.5 in steps of 0.025.
var DefaultActClipGrid = func() []float64 {
	g := make([]float64, 21)
	for i := range g {
		g[i] = 1 - 0.025*float64(i)
	}
	return g
}()

// ActClipResult is the outcome of SearchActClip: the chosen ratio, and for every grid value (in grid
// order) the squared error of the weight's board matmul against the float product, summed over the
// sample's rows and the output channels used. Ref is the sum of squares of the float product over the
// same outputs, so Err[i]/Ref is a relative squared error.
type ActClipResult struct {
	Clip     float64
	Err      []float64
	Ref      float64
	Channels int // output channels the error was summed over
}

// ActClipChannels returns the output channels SearchActClip sums the error over for a weight of n rows
// when at most maxChannels may be used (maxChannels <= 0 or >= n: all of them): channels
// i·n/maxChannels for i = 0..maxChannels-1, spread evenly over the rows.
func ActClipChannels(n, maxChannels int) []int {
	m := n
	if maxChannels > 0 && maxChannels < n {
		m = maxChannels
	}
	out := make([]int, m)
	for i := range out {
		out[i] = int(int64(i) * int64(n) / int64(m))
	}
	return out
}

// SearchActClip chooses the activation clip ratio of the quantized weight w (in the rotated space when w
// is rotated) from grid: for each ratio c, the rows x (rows float activation rows of w.K values, e.g. a
// calibration sample) go through w's board arithmetic with c (w.MatMul: rotate, quantize per token to
// abits with scale c·amax/qmax, integer matmul: exactly what the board computes), and the squared difference to the float product x·fᵀ
// with the float weight f (N x K, the weight w was quantized from) is summed over the rows and the
// output channels ActClipChannels(N, maxChannels). The ratio with the least error wins; ties keep the
// earlier ratio of grid. Every grid value must be in (0, 1]; it is used exactly as given (round it to
// float32 first when the result is stored as float32, as a pack does).
func SearchActClip(ctx context.Context, w *Weight, f Matrix, x []float32, rows, abits int, grid []float64, maxChannels, workers int) (ActClipResult, error) {
	if err := w.Validate(); err != nil {
		return ActClipResult{}, err
	}
	if f.Rows != w.N || f.Cols != w.K || len(f.Data) != f.Rows*f.Cols {
		return ActClipResult{}, fmt.Errorf("%s: float weight %dx%d, quantized weight has N=%d K=%d: %w", f.Name, f.Rows, f.Cols, w.N, w.K, ErrShape)
	}
	if rows < 1 || len(x) != rows*w.K {
		return ActClipResult{}, fmt.Errorf("%s: %d activation values for %d rows of K=%d: %w", f.Name, len(x), rows, w.K, ErrShape)
	}
	if len(grid) == 0 {
		return ActClipResult{}, fmt.Errorf("%s: empty activation clip grid: %w", f.Name, ErrParam)
	}
	for _, c := range grid {
		if !(c > 0 && c <= 1) {
			return ActClipResult{}, fmt.Errorf("%s: activation clip %v: %w (want 0 < clip <= 1)", f.Name, c, ErrParam)
		}
	}
	ch := ActClipChannels(w.N, maxChannels)
	sub := w.rowsOf(ch)
	ref := make([]float64, rows*len(ch))
	var refSS float64
	for t := 0; t < rows; t++ {
		xt := x[t*w.K : (t+1)*w.K]
		for j, n := range ch {
			var s float64
			for k, v := range f.Data[n*f.Cols : (n+1)*f.Cols] {
				s += float64(v) * float64(xt[k])
			}
			ref[t*len(ch)+j] = s
			refSS += s * s
		}
	}
	xr := x
	if !w.Rotation.IsZero() { // rotate once for every ratio
		xr = make([]float32, rows*w.KP)
		if err := w.Rotation.Apply(xr, x, rows); err != nil {
			return ActClipResult{}, fmt.Errorf("%s: %w", f.Name, err)
		}
	}
	res := ActClipResult{Clip: grid[0], Err: make([]float64, len(grid)), Ref: refSS, Channels: len(ch)}
	y := make([]float32, rows*len(ch))
	best := math.Inf(1)
	for i, c := range grid {
		if err := ctx.Err(); err != nil {
			return ActClipResult{}, err
		}
		a, err := QuantizeActivations(xr, rows, w.KP, abits, c)
		if err != nil {
			return ActClipResult{}, fmt.Errorf("%s: %w", f.Name, err)
		}
		if err := MatMulInt(ctx, a, sub, y, workers); err != nil {
			return ActClipResult{}, fmt.Errorf("%s: %w", f.Name, err)
		}
		var e float64
		for j, v := range y {
			d := float64(v) - ref[j]
			e += d * d
		}
		res.Err[i] = e
		if e < best {
			best, res.Clip = e, c
		}
	}
	return res, nil
}

// rowsOf returns the weight made of rows ch of w (sharing nothing with w).
func (w *Weight) rowsOf(ch []int) *Weight {
	ng := w.Groups()
	s := &Weight{N: len(ch), K: w.K, KP: w.KP, Bits: w.Bits, Group: w.Group, Rotation: w.Rotation,
		Codes: make([]int8, len(ch)*w.KP), Scales: make([]float32, len(ch)*ng)}
	for j, n := range ch {
		copy(s.Codes[j*w.KP:(j+1)*w.KP], w.Codes[n*w.KP:(n+1)*w.KP])
		copy(s.Scales[j*ng:(j+1)*ng], w.Scales[n*ng:(n+1)*ng])
	}
	return s
}
