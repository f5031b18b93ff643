package quant

import (
	"context"
	"fmt"
	"log/slog"
	"sort"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// GPTQ quantizes m (N x K) against the Hessian h (K x K) as IST-DASLab's gptq.py does (see the
// package doc), with the clip search (weighted by diag(H)) choosing each scale. Rows are
// independent given H⁻¹, so they are processed in parallel chunks (WithWorkers). A Hessian that
// stays not positive definite after every damping retry is ErrCholesky naming m.Name.
//
// Peak memory is about (5·KP² + 2·N·KP)·8 bytes: H, a damped copy, gonum's factor and inverse,
// then U; the float64 weights (and the float32 rotated copy when rotated).
func GPTQ(ctx context.Context, m Matrix, h *Hessian, opts ...Option) (*Weight, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	if c.actOrder && c.group != 0 && !c.staticGroups {
		return nil, fmt.Errorf("%s: act-order with group size %d needs static groups (a Weight's groups are contiguous in K): %w", m.Name, c.group, ErrParam)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%s: GPTQ needs a Hessian: %w", m.Name, ErrParam)
	}
	if err := h.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	if h.K != m.Cols {
		return nil, fmt.Errorf("%s: Hessian is %dx%d, weight has K=%d: %w", m.Name, h.K, h.K, m.Cols, ErrShape)
	}
	w, data, hsrc, err := prepare(m, h, c)
	if err != nil {
		return nil, err
	}
	kp := w.KP
	H := hsrc
	if w.Rotation.IsZero() {
		H = append([]float64(nil), hsrc...) // never modify the caller's Hessian
	} // else hsrc is prepare's fresh rotated copy
	diag0 := make([]float64, kp)
	for k := range diag0 {
		diag0[k] = H[k*kp+k]
	}
	W := make([]float64, w.N*kp)
	for i, v := range data {
		W[i] = float64(v)
	}
	// Dead columns: an input that is always zero carries no information; pin its weight to 0.
	for k := 0; k < kp; k++ {
		if H[k*kp+k] == 0 {
			H[k*kp+k] = 1
			for n := 0; n < w.N; n++ {
				W[n*kp+k] = 0
			}
		}
	}
	g := effGroup(kp, w.Group)
	ng := w.Groups()
	static := c.staticGroups || w.Group == 0
	if static { // every scale from the (dead-zeroed) original weights, before any update
		for n := 0; n < w.N; n++ {
			row := W[n*kp : (n+1)*kp]
			for gi := 0; gi < ng; gi++ {
				lo, hi := gi*g, min((gi+1)*g, kp)
				w.Scales[n*ng+gi] = chooseScale(row[lo:hi], diag0[lo:hi], w.Bits, c.clipGrid)
			}
		}
	}
	perm := identityPerm(kp)
	if c.actOrder {
		sort.SliceStable(perm, func(a, b int) bool { return diag0[perm[a]] > diag0[perm[b]] })
		W = permuteCols(W, w.N, kp, perm)
		H = permuteSym(H, kp, perm)
	}
	U, damp, err := inverseCholeskyUpper(H, kp, c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	if damp != c.percDamp {
		slog.Debug("gptq: damping raised", "weight", m.Name, "percdamp", damp)
	}
	st := &gptqState{w: w, W: W, U: U, perm: perm, diag: diag0, g: g, ng: ng, static: static, c: c}
	if err := forRows(ctx, w.N, c.workers, st.rows); err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	w.QErr = weightedRelErr(w, data, diag0)
	return w, nil
}

type gptqState struct {
	w      *Weight
	W      []float64 // [N][KP], columns in permuted order
	U      []float64 // upper Cholesky factor of H⁻¹ (permuted), row-major KP x KP
	perm   []int     // permuted column -> natural column
	diag   []float64 // natural-order diag(H) before damping, for the clip search
	g, ng  int
	static bool
	c      *config
}

// rows runs GPTQ on rows [lo, hi): each row only needs U, so chunks are independent.
func (s *gptqState) rows(lo, hi int) {
	w, kp, bs := s.w, s.w.KP, s.c.blockSize
	nr := hi - lo
	Wc := s.W[lo*kp : hi*kp]
	err1 := make([]float64, nr*bs)
	lov, hiv := codeRange(w.Bits)
	for i1 := 0; i1 < kp; i1 += bs {
		i2 := min(i1+bs, kp)
		done := i1 // columns [i1, done) have already pushed their errors to W[:, i2:]
		for i := i1; i < i2; i++ {
			urow := s.U[i*kp : (i+1)*kp]
			d := urow[i]
			nat := s.perm[i]
			if !s.static && i%s.g == 0 { // dynamic group scale from the current weights
				end := min(i+s.g, kp)
				if end > i2 && i > done {
					// the group reaches past the block: bring its columns up to date first
					s.lazyUpdate(Wc, err1, nr, i1, done, i, i2)
					done = i
				}
				gi := i / s.g
				for r := 0; r < nr; r++ {
					row := Wc[r*kp : (r+1)*kp]
					w.Scales[(lo+r)*s.ng+gi] = chooseScale(row[i:end], s.diag[i:end], w.Bits, s.c.clipGrid)
				}
			}
			gi := nat / s.g
			for r := 0; r < nr; r++ {
				row := Wc[r*kp : (r+1)*kp]
				sc := float64(w.Scales[(lo+r)*s.ng+gi])
				x := row[i]
				var code, q float64
				if sc != 0 {
					code = quantCode(x, 1/sc, float64(lov), float64(hiv))
					q = code * sc
				}
				w.Codes[(lo+r)*kp+nat] = int8(code)
				e := (x - q) / d
				err1[r*bs+(i-i1)] = e
				if e != 0 {
					for j := i + 1; j < i2; j++ {
						row[j] -= e * urow[j]
					}
				}
			}
		}
		s.lazyUpdate(Wc, err1, nr, i1, done, i2, i2)
	}
}

// lazyUpdate applies the errors of columns [from, to) of the block starting at i1 to the
// columns after the block: W[:, i2:] -= Err1[:, from-i1:to-i1] · U[from:to, i2:].
func (s *gptqState) lazyUpdate(Wc, err1 []float64, nr, i1, from, to, i2 int) {
	kp, bs := s.w.KP, s.c.blockSize
	if from >= to || i2 >= kp {
		return
	}
	a := blas64.General{Rows: nr, Cols: to - from, Stride: bs, Data: err1[from-i1:]}
	b := blas64.General{Rows: to - from, Cols: kp - i2, Stride: kp, Data: s.U[from*kp+i2:]}
	c := blas64.General{Rows: nr, Cols: kp - i2, Stride: kp, Data: Wc[i2:]}
	blas64.Gemm(blas.NoTrans, blas.NoTrans, -1, a, b, 1, c)
}

func identityPerm(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

// permuteCols returns W with column j taken from column perm[j].
func permuteCols(W []float64, n, k int, perm []int) []float64 {
	out := make([]float64, len(W))
	for r := 0; r < n; r++ {
		for j, p := range perm {
			out[r*k+j] = W[r*k+p]
		}
	}
	return out
}

// permuteSym returns H[perm][:, perm].
func permuteSym(H []float64, k int, perm []int) []float64 {
	out := make([]float64, len(H))
	for i, pi := range perm {
		for j, pj := range perm {
			out[i*k+j] = H[pi*k+pj]
		}
	}
	return out
}
