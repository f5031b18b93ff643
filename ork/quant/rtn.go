package quant

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"orkpipe/ork/internal/parallel"
)

// RTN quantizes m (N x K) by round-to-nearest with the clip search: for each output channel or
// group the shrink factor of the clip grid that minimises the squared error (weighted by diag(H)
// when h is not nil) sets the scale. With WithRotation the rows (and h) are rotated first.
// QErr is the diag(H)-weighted relative error with h, else the relative Frobenius error.
func RTN(ctx context.Context, m Matrix, h *Hessian, opts ...Option) (*Weight, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if h != nil {
		if !c.hChecked {
			if err := h.Validate(); err != nil {
				return nil, fmt.Errorf("%s: %w", m.Name, err)
			}
		}
		if h.K != m.Cols {
			return nil, fmt.Errorf("%s: Hessian is %dx%d, weight has K=%d: %w", m.Name, h.K, h.K, m.Cols, ErrShape)
		}
	}
	w, data, err := prepare(m, c)
	if err != nil {
		return nil, err
	}
	var diag []float64 // the clip search's weights: diag(H), rotated as the weight is
	switch {
	case h == nil:
	case w.Rotation.IsZero():
		diag = make([]float64, w.KP)
		for k := range diag {
			diag[k] = h.Data[k*w.KP+k]
		}
	default:
		diag = w.Rotation.hessianDiag(h.Data)
	}
	if err := rtnRows(ctx, w, matrixRows(data, w.KP), diag, c, nil); err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	return w, nil
}

// rowsFunc returns rows [lo, hi) of a weight as float32 [hi-lo][KP] (rotated when the weight is),
// either aliasing a whole matrix or read into the worker's scratch.
type rowsFunc func(ctx context.Context, lo, hi int, scratch *[]float32) ([]float32, error)

// matrixRows serves rows of data ([N][KP]) in place.
func matrixRows(data []float32, kp int) rowsFunc {
	return func(_ context.Context, lo, hi int, _ *[]float32) ([]float32, error) {
		return data[lo*kp : hi*kp], nil
	}
}

// rtnChunkBytes bounds the float32 rows one worker takes at a time (what a streamed weight holds
// per worker).
const rtnChunkBytes = 1 << 20

// rtnRows quantizes every row rows serves into w with the clip search weighted by diag (nil:
// unweighted), on c.workers goroutines taking chunks of rows in turn, and sets w.QErr to
// sqrt(num/den): num sums the chosen candidates' errors and den Σ diag_k·x_k², each per group,
// then over the groups of a row, then over the rows, in order — the same value on any number of
// workers. Grids the float32 search takes (grid32OK) are searched in float32 (quantizeRow32, diag
// scaled by weights32), others in float64 (quantizeRow). The codes go to w.Codes, or, when sink is
// not nil, to sink a chunk of rows at a time (w.Codes stays nil; see CodeSink).
func rtnRows(ctx context.Context, w *Weight, rows rowsFunc, diag []float64, c *config, sink CodeSink) error {
	if c.scaleSearch != ScaleSearchWeighted {
		return fmt.Errorf("RTN has no GPTQ loss to search scales by (scale search gptq is GPTQ's): %w", ErrParam)
	}
	factors := c.scaleFactors()
	use32 := grid32OK(factors)
	var wd32 []float32
	var wd64 []float64
	if use32 {
		wd32, wd64 = weights32(diag)
	}
	nums, dens := make([]float64, w.N), make([]float64, w.N)
	chunk := max(1, min((w.N+4*c.workers-1)/(4*c.workers), rtnChunkBytes/(4*w.KP)))
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range min(c.workers, (w.N+chunk-1)/chunk) {
		g.Go(func() error {
			var buf []float64
			var cs *clipScratch
			var s32 *search32
			if use32 {
				s32 = newSearch32(factors, w.KP)
			} else {
				buf, cs = make([]float64, w.KP), newClipScratch(len(factors))
			}
			var scratch []float32
			var own []int8 // the chunk's codes when they go to sink
			if sink != nil {
				own = make([]int8, chunk*w.KP)
			}
			for {
				lo := int(next.Add(int64(chunk))) - chunk
				if lo >= w.N {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return err
				}
				hi := min(lo+chunk, w.N)
				data, err := rows(gctx, lo, hi, &scratch)
				if err != nil {
					return err
				}
				codes := own
				if sink == nil {
					codes = w.Codes[lo*w.KP:]
				}
				for n := lo; n < hi; n++ {
					row := data[(n-lo)*w.KP : (n-lo+1)*w.KP]
					rc := codes[(n-lo)*w.KP : (n-lo+1)*w.KP]
					if use32 {
						nums[n], dens[n] = quantizeRow32(w, n, rc, row, wd32, wd64, factors, s32)
						continue
					}
					for k, v := range row {
						buf[k] = float64(v)
					}
					nums[n], dens[n] = quantizeRow(w, n, rc, buf, diag, factors, cs)
				}
				if sink != nil {
					if err := sink(lo, own[:(hi-lo)*w.KP]); err != nil {
						return err
					}
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var num, den float64
	for n := range nums {
		num += nums[n]
		den += dens[n]
	}
	w.QErr = 0
	if den != 0 {
		w.QErr = math.Sqrt(num / den)
	}
	return nil
}

// prepare validates the shapes, builds the Weight shell and returns the (rotated, padded) weight
// data [N][KP].
func prepare(m Matrix, c *config) (*Weight, []float32, error) {
	w := &Weight{N: m.Rows, K: m.Cols, KP: m.Cols, Bits: c.bits, Group: c.group}
	data := m.Data
	if c.rotate {
		r, err := NewRotationMinBlock(m.Cols, c.signs, c.seed, c.minBlock)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", m.Name, err)
		}
		w.Rotation, w.KP = r, r.Padded
		data = make([]float32, w.N*w.KP)
		if err := r.ApplyRows(data, m.Data, m.Rows, c.workers); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", m.Name, err)
		}
	}
	w.Codes = make([]int8, w.N*w.KP)
	w.Scales = make([]float32, w.N*w.Groups())
	return w, data, nil
}

// rotatedHessian returns h's data rotated as w is, [KP][KP], on up to workers goroutines: h.Data
// itself when w is not rotated; rotated in place when consume (WithConsumeHessian) and the rotation
// does not pad; else a new matrix.
func rotatedHessian(w *Weight, h *Hessian, consume bool, workers int) []float64 {
	r := w.Rotation
	switch {
	case r.IsZero():
		return h.Data
	case consume && r.Padded == r.K:
		return r.rotateHessianInto(h.Data, h.Data, workers)
	default:
		return r.rotateHessian(h.Data, workers)
	}
}

// quantizeRow quantizes row n of w from its float64 values x (len KP) into codes (len KP) and w's
// scales, with optional per-column weights diag, choosing each group's clip factor from grid, and
// returns the row's squared error and squared norm (weighted by diag), summed group by group.
func quantizeRow(w *Weight, n int, codes []int8, x, diag []float64, grid []float64, cs *clipScratch) (num, den float64) {
	g := effGroup(w.KP, w.Group)
	ng := w.Groups()
	codes = codes[:w.KP]
	for gi := 0; gi < ng; gi++ {
		lo, hi := gi*g, min((gi+1)*g, w.KP)
		var wd []float64
		if diag != nil {
			wd = diag[lo:hi]
		}
		s, e, d := quantizeGroup(codes[lo:hi], x[lo:hi], wd, w.Bits, grid, cs)
		w.Scales[n*ng+gi] = s
		num += e
		den += d
	}
	return num, den
}

// chooseScale is chooseScaleErr's scale. cs must come from newClipScratch(len(grid)); the caller
// keeps it for all its groups (a scratch per call was 0.4 KiB of garbage a group: 1.1 GB for one
// 27B ffn_down, the Go heap's churn during GPTQ).
func chooseScale(x, wd []float64, bits int, grid []float64, cs *clipScratch) float32 {
	s, _ := chooseScaleErr(x, wd, bits, grid, cs)
	return s
}

// quantCode is clamp(round(v·inv), lo, hi), round half away from zero: the one rounding rule
// of every quantizer in this package (inv = 1/scale).
func quantCode(v, inv, lo, hi float64) float64 {
	q := roundAway(v * inv)
	if q > hi {
		return hi
	}
	if q < lo {
		return lo
	}
	return q
}

// quantizeWith writes quantCode(x, 1/s) into codes (s = 0: all zero).
func quantizeWith(codes []int8, x []float64, s float32, bits int) {
	if s == 0 {
		for i := range codes {
			codes[i] = 0
		}
		return
	}
	lo, hi := codeRange(bits)
	quantCodes(codes, x, 1/float64(s), float64(lo), float64(hi))
}

// weightedRelErr returns sqrt(Σ d_k (W-Q)²/Σ d_k W²) (d nil: unweighted, the relative
// Frobenius error) over w's stored space.
func weightedRelErr(w *Weight, data []float32, diag []float64) float64 {
	g := effGroup(w.KP, w.Group)
	ng := w.Groups()
	var num, den float64
	for n := 0; n < w.N; n++ {
		for k := 0; k < w.KP; k++ {
			x := float64(data[n*w.KP+k])
			q := float64(w.Codes[n*w.KP+k]) * float64(w.Scales[n*ng+k/g])
			wt := 1.0
			if diag != nil {
				wt = diag[k]
			}
			num += wt * (x - q) * (x - q)
			den += wt * x * x
		}
	}
	if den == 0 {
		return 0
	}
	return math.Sqrt(num / den)
}

// forRowsChunk is the rows of a chunk of forRows(ctx, n, workers, fn).
func forRowsChunk(n, workers int) int {
	workers = max(workers, 1)
	return max(1, (n+4*workers-1)/(4*workers))
}

// forRowsCalls is the number of calls forRows(ctx, n, workers, fn) makes of fn (about four a
// goroutine, at most n): what a fn allocating on each call allocates in all.
func forRowsCalls(n, workers int) int {
	if n < 1 {
		return 0
	}
	chunk := forRowsChunk(n, workers)
	return (n + chunk - 1) / chunk
}

// forRows runs fn over [0, n) in contiguous chunks (about four a goroutine) on at most workers
// goroutines; once ctx is cancelled no goroutine starts another chunk, and ctx's error is returned.
func forRows(ctx context.Context, n, workers int, fn func(lo, hi int)) error {
	chunk := forRowsChunk(n, workers)
	parallel.For((n+chunk-1)/chunk, max(workers, 1), func(c int) {
		if ctx.Err() == nil {
			fn(c*chunk, min(c*chunk+chunk, n))
		}
	})
	return ctx.Err()
}
