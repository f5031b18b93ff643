package quant

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// MaxScaleRefit bounds WithScaleRefit's rounds. DefaultRefitSteps is the conjugate-gradient steps of
// one row's refit the build uses, MaxRefitSteps their bound: a row of no more groups than steps is
// solved exactly, up to rounding, in as many steps as it has groups; with 32 groups, K = 1024, four
// steps came within 1e-5 of 32. The steps change the scales of rows of more groups than steps (the
// w4a4-best pack of stories260K, whose ffn_down rows have 8 groups, differs between 4 and 8 steps), so
// a stage that refits must hold them in its key.
const (
	MaxScaleRefit     = 4
	DefaultRefitSteps = 4
	MaxRefitSteps     = 64
)

// RefitVersion names the arithmetic of WithScaleRefit, for keys (stages.FinalizeParams): 1 took
// each conjugate-gradient step's product with H as two triangular solves with GPTQ's factor; 2
// formed every row's Gram matrix AᵀHA from H once and stepped with it, and each refit took the
// residual's product (t − A·s)·H; 3 (this one) takes t·H once for all the rounds, in blocks of
// targetBlock rows, and the residual's terms from it and the Gram matrix (AᵀH·x = AᵀH·t − AᵀHA·s):
// a third of the flops of a refit. The method and its results are the same up to rounding, which
// can still round a float32 scale the other way.
const RefitVersion = 3

// WithScaleRefit makes GPTQ refit every row's group scales after its codes are chosen, codes fixed, to
// minimise the calibrated output error (w − q)ᵀ·H·(w − q) of the row (H the damped Hessian GPTQ
// factored, w the row GPTQ quantized: the float weight, rotated when the weight is, or the
// asymmetric target of WithQuantizedInputs). The scales of one row are the unknowns of a small
// least-squares problem, one per group, with normal equations (AᵀHA)·s = AᵀH·w (A the row's codes,
// one column per group): solved by conjugate gradients from GPTQ's scales, preconditioned by
// c_gᵀ·diag(H)·c_g, in the space of the groups — the row's Gram matrix AᵀHA is formed once from H
// (which GPTQ's factorisation leaves below the diagonal of its buffer: no second K x K matrix), and
// each step is a product with it. Each step lowers the row's error, so the refit never does worse
// than GPTQ's scales on H. rounds > 1 alternates: GPTQ chooses the codes again with the refitted
// scales fixed, the scales are refitted to those codes, and each row keeps whichever codes and
// scales have the lower error. Each refit takes at most steps conjugate-gradient steps a row
// (DefaultRefitSteps is the build's). rounds 0 (default) is off, and then steps must be 0 too. Not
// with act-order (H is permuted).
func WithScaleRefit(rounds, steps int) Option {
	return func(c *config) error {
		if rounds < 0 || rounds > MaxScaleRefit {
			return fmt.Errorf("scale refit rounds %d: %w (want 0..%d)", rounds, ErrParam, MaxScaleRefit)
		}
		if rounds > 0 && (steps < 1 || steps > MaxRefitSteps) || rounds == 0 && steps != 0 {
			return fmt.Errorf("scale refit of %d rounds with %d steps: %w (want 1..%d steps with rounds, 0 without)", rounds, steps, ErrParam, MaxRefitSteps)
		}
		c.refit, c.refitSteps = rounds, steps
		return nil
	}
}

// RefitMemory is what WithScaleRefit(rounds) adds to GPTQMemory for an n x kp weight with group size
// group: the target's products with H (targetProducts: n x kp float64 and one value a row), and per
// worker a refitScratch and the targetBlock rows targetTimesH copies; with more than one round, a
// copy of the codes and scales and two errors per row.
func RefitMemory(n, kp, group, rounds int) int64 {
	if rounds <= 0 {
		return 0
	}
	ng := int64(numGroups(kp, group))
	perWorker := refitScratchBytes(int64(kp), ng, int64(effGroup(kp, group))) + 8*targetBlock*int64(kp)
	b := int64(runtime.GOMAXPROCS(0))*perWorker + 8*int64(n)*(int64(kp)+1)
	if rounds > 1 {
		b += int64(n)*int64(kp) + int64(n)*ng*4 + 2*int64(n)*8
	}
	return b
}

// refitBlock is the number of rows whose Gram matrices are formed together; targetBlock the number of
// rows of the target whose product with H is taken together (targetTimesH: two triangular products
// with H's lower triangle, which one OpenBLAS thread runs at 32 GFLOP/s for 32 rows of 8192 and 48
// for 128).
const (
	refitBlock  = 32
	targetBlock = 128
)

// hessBuffer is GPTQ's KP x KP buffer as inverseCholeskyUpper leaves it when asked to keep H: the
// factor U of H⁻¹ on and above the diagonal (row-major), H strictly below it, and H's diagonal (the
// damped one, the matrix that was factored) beside it.
type hessBuffer struct {
	a    []float64
	diag []float64
	kp   int
}

// refitScratch is one worker's buffers for refitScales on a block of at most refitBlock rows.
type refitScratch struct {
	ct, p []float64 // the codes transposed (kp x refitBlock); H's column blocks times them
	d     []float64 // one g x g diagonal block of H
	gram  []float64 // each row's Gram matrix AᵀHA, symmetric, packed (symPacked)
	vec   []float64 // eight per-group vectors a row
}

// refitScratchBytes is the size of a refitScratch for rows of kp values in ng groups of g.
func refitScratchBytes(kp, ng, g int64) int64 {
	return 8 * (2*refitBlock*kp + g*g + refitBlock*int64(symPacked(int(ng))) + 8*refitBlock*ng)
}

func newRefitScratch(kp, ng, g int) *refitScratch {
	return &refitScratch{
		ct: make([]float64, kp*refitBlock), p: make([]float64, kp*refitBlock),
		d: make([]float64, g*g), gram: make([]float64, refitBlock*symPacked(ng)),
		vec: make([]float64, 8*refitBlock*ng),
	}
}

// targetProducts holds, for an n x kp target t (its dead columns counted as zero), t·H (n x kp,
// row-major) and tᵀHt a row: what every refit of the rows reads in place of its residual's product
// with H, taken once for all the rounds.
type targetProducts struct {
	th  []float64
	tht []float64
}

// targetTimesH sets tp for the n x kp target (dead columns as zero) and H from hb, rows in blocks of
// targetBlock on workers goroutines: t·H = t·(L+I) + t·(L+I)ᵀ − 2t + t·diag(H), L the strict lower
// triangle of the buffer (two triangular products with a unit diagonal, so U's diagonal in the
// buffer is never read).
func targetTimesH(ctx context.Context, target []float32, hb hessBuffer, dead []bool, n, workers int) (targetProducts, error) {
	kp := hb.kp
	tp := targetProducts{th: make([]float64, n*kp), tht: make([]float64, n)}
	tmp := sync.Pool{New: func() any { return make([]float64, targetBlock*kp) }}
	l := blas64.Triangular{Uplo: blas.Lower, Diag: blas.Unit, N: kp, Stride: kp, Data: hb.a}
	err := forRows(ctx, n, workers, func(lo, hi int) {
		t := tmp.Get().([]float64)
		defer tmp.Put(t)
		for r0 := lo; r0 < hi; r0 += targetBlock {
			nb := min(targetBlock, hi-r0)
			th, tt := tp.th[r0*kp:(r0+nb)*kp], t[:nb*kp]
			for i, v := range target[r0*kp : (r0+nb)*kp] {
				if dead[i%kp] {
					v = 0
				}
				th[i] = float64(v)
			}
			copy(tt, th)
			m := blas64.General{Rows: nb, Cols: kp, Stride: kp}
			m.Data = th
			blas64.Trmm(blas.Right, blas.NoTrans, 1, l, m)
			m.Data = tt
			blas64.Trmm(blas.Right, blas.Trans, 1, l, m)
			for r := 0; r < nb; r++ {
				hr, tr, xr := th[r*kp:(r+1)*kp], tt[r*kp:(r+1)*kp], target[(r0+r)*kp:(r0+r+1)*kp]
				e := 0.0
				for k, xv := range xr {
					v := float64(xv)
					if dead[k] {
						v = 0
					}
					hr[k] += tr[k] - 2*v + v*hb.diag[k]
					e += v * hr[k]
				}
				tp.tht[r0+r] = e
			}
		}
	})
	return tp, err
}

// refitScales refits the scales of rows [lo, hi) of w to the target whose products with H tp holds
// (targetTimesH; the target's dead columns count as zero, as GPTQ's codes there are), H from hb,
// diag = diag(H) for the Jacobi preconditioner c_gᵀ·diag(H)·c_g of each group's scale. A group
// whose preconditioner is 0 (all its codes zero, or dead) keeps its scale. Each row takes at most
// steps conjugate-gradient steps. errs[r] (r in [lo, hi)) receives the row's error
// (t − q)ᵀ·H·(t − q) with its refitted float32 scales.
//
// Per block of rows it forms the rows' Gram matrices AᵀHA (column block by column block of H,
// general matrix products one group wide): K² flops a row. The residual x = t − A·s₀ enters
// through AᵀH·x = AᵀH·t − AᵀHA·s₀ and xᵀHx = tᵀHt − 2s₀·AᵀHt + s₀ᵀAᵀHA·s₀. Then it runs the
// conjugate gradients on the Gram matrices (ng² a step) and takes the error from the same
// quantities: (x − A·δ)ᵀH(x − A·δ) = xᵀHx − 2δ·AᵀHx + δᵀ(AᵀHA)δ, δ the scales' change.
func refitScales(w *Weight, tp targetProducts, hb hessBuffer, diag []float64, lo, hi int, steps int, errs []float64, sc *refitScratch) {
	kp, ng := w.KP, w.Groups()
	g := effGroup(kp, w.Group)
	const R = refitBlock
	v := sc.vec
	s, rho, z, p, pre, mp, g0, u := v[:R*ng], v[R*ng:2*R*ng], v[2*R*ng:3*R*ng], v[3*R*ng:4*R*ng], v[4*R*ng:5*R*ng], v[5*R*ng:6*R*ng], v[6*R*ng:7*R*ng], v[7*R*ng:8*R*ng]
	var rz, e0 [R]float64
	var active [R]bool
	for r0 := lo; r0 < hi; r0 += R {
		nb := min(R, hi-r0)
		// the scales, the codes transposed, the preconditioner c_gᵀ·diag(H)·c_g
		for r := 0; r < nb; r++ {
			row := r0 + r
			codes := w.Codes[row*kp : (row+1)*kp]
			for gi := 0; gi < ng; gi++ {
				s[r*ng+gi] = float64(w.Scales[row*ng+gi])
				a, b := gi*g, min((gi+1)*g, kp)
				d := 0.0
				for k := a; k < b; k++ {
					c := float64(codes[k])
					sc.ct[k*R+r] = c
					d += c * c * diag[k]
				}
				pre[r*ng+gi] = d
			}
		}
		gramProducts(hb, sc, nb, ng, g)
		for r := 0; r < nb; r++ {
			row := r0 + r
			G := sc.gram[r*symPacked(ng) : (r+1)*symPacked(ng)]
			ur, rr, sr := u[r*ng:(r+1)*ng], rho[r*ng:(r+1)*ng], s[r*ng:(r+1)*ng]
			codeGroupDots(ur, w.Codes[row*kp:(row+1)*kp], tp.th[row*kp:(row+1)*kp], g)
			symMulPacked(rr, G, sr)
			e := tp.tht[row]
			for gi, uv := range ur {
				rr[gi] = uv - rr[gi] // AᵀH·x = AᵀH·t − AᵀHA·s
				e -= sr[gi] * (uv + rr[gi])
			}
			e0[r] = e
			rz[r] = 0
			for gi := 0; gi < ng; gi++ {
				i := r*ng + gi
				z[i] = 0
				if pre[i] > 0 {
					z[i] = rho[i] / pre[i]
				}
				p[i] = z[i]
				rz[r] += rho[i] * z[i]
			}
			active[r] = rz[r] > 0
		}
		copy(g0[:nb*ng], rho[:nb*ng]) // AᵀH·x₀, for the error at the end
		iters := min(ng, steps)
		for r := 0; r < nb; r++ {
			G := sc.gram[r*symPacked(ng) : (r+1)*symPacked(ng)]
			for it := 0; it < iters && active[r]; it++ {
				pr, mpr := p[r*ng:(r+1)*ng], mp[r*ng:(r+1)*ng]
				symMulPacked(mpr, G, pr)
				pmp := 0.0
				for gi, m := range mpr {
					pmp += pr[gi] * m
				}
				if !(pmp > 0) {
					active[r] = false
					break
				}
				alpha := rz[r] / pmp
				rzNew := 0.0
				for gi := 0; gi < ng; gi++ {
					i := r*ng + gi
					s[i] += alpha * p[i]
					rho[i] -= alpha * mp[i]
					z[i] = 0
					if pre[i] > 0 {
						z[i] = rho[i] / pre[i]
					}
					rzNew += rho[i] * z[i]
				}
				beta := rzNew / rz[r]
				for gi := 0; gi < ng; gi++ {
					i := r*ng + gi
					p[i] = z[i] + beta*p[i]
				}
				rz[r] = rzNew
				if !(rzNew > 0) {
					active[r] = false
				}
			}
			// the scales as stored, and the row's error with them
			row := r0 + r
			delta := mp[r*ng : (r+1)*ng]
			for gi := 0; gi < ng; gi++ {
				f := float32(s[r*ng+gi])
				delta[gi] = float64(f) - float64(w.Scales[row*ng+gi])
				w.Scales[row*ng+gi] = f
			}
			g0, gd := g0[r*ng:(r+1)*ng], z[r*ng:(r+1)*ng]
			symMulPacked(gd, G, delta)
			e := e0[r]
			for gi, dv := range delta {
				e += dv * (gd[gi] - 2*g0[gi])
			}
			errs[row] = e
		}
	}
}

// gramProducts sets, for the nb rows whose codes sc.ct holds (transposed), each row's Gram matrix
// AᵀHA (sc.gram, packed), H read from hb column block by column block (group h's columns: H[:h, h]
// is the transpose of group h's rows below the diagonal, H[h, h] is assembled into sc.d).
func gramProducts(hb hessBuffer, sc *refitScratch, nb, ng, g int) {
	const R = refitBlock
	kp, a := hb.kp, hb.a
	gen := func(rows, cols, stride int, data []float64) blas64.General {
		return blas64.General{Rows: rows, Cols: cols, Stride: stride, Data: data}
	}
	for h := 0; h < ng; h++ {
		a0, a1 := h*g, min((h+1)*g, kp)
		gh := a1 - a0
		for i := 0; i < gh; i++ { // H[h, h]
			for j := 0; j < gh; j++ {
				switch {
				case i == j:
					sc.d[i*gh+j] = hb.diag[a0+i]
				case i > j:
					sc.d[i*gh+j] = a[(a0+i)*kp+a0+j]
				default:
					sc.d[i*gh+j] = a[(a0+j)*kp+a0+i]
				}
			}
		}
		d := gen(gh, gh, gh, sc.d)
		ch := gen(gh, nb, R, sc.ct[a0*R:])  // the rows' codes of group h
		below := gen(gh, a0, kp, a[a0*kp:]) // H[h, :h] = H[:h, h]ᵀ
		// P = H[:h+1, h]·C_h: the column block of H times the codes of group h
		if a0 > 0 {
			blas64.Gemm(blas.Trans, blas.NoTrans, 1, below, ch, 0, gen(a0, nb, R, sc.p))
		}
		blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, d, ch, 0, gen(gh, nb, R, sc.p[a0*R:]))
		// Gram entries (h', h), h' <= h: Σ over the columns k of group h' of c_k·P[k]
		for hp := 0; hp <= h; hp++ {
			gramEntries(sc, hp*g, min((hp+1)*g, kp), nb, symPacked(ng), h*(h+1)/2+hp)
		}
	}
}

// gramEntries sets sc.gram[r·stride + at] to Σ_{k in [k0, k1)} ct[k][r]·p[k][r] for the nb rows r,
// summed in the order of k: four rows at a time in registers (each row's sum is the same).
func gramEntries(sc *refitScratch, k0, k1, nb, stride, at int) {
	const R = refitBlock
	ct, p := sc.ct[k0*R:k1*R], sc.p[k0*R:k1*R]
	r := 0
	for ; r+4 <= nb; r += 4 {
		var a0, a1, a2, a3 float64
		for i := r; i+3 < len(ct); i += R {
			c, q := ct[i:i+4:i+4], p[i:i+4:i+4]
			a0 += c[0] * q[0]
			a1 += c[1] * q[1]
			a2 += c[2] * q[2]
			a3 += c[3] * q[3]
		}
		sc.gram[r*stride+at] = a0
		sc.gram[(r+1)*stride+at] = a1
		sc.gram[(r+2)*stride+at] = a2
		sc.gram[(r+3)*stride+at] = a3
	}
	for ; r < nb; r++ {
		a := 0.0
		for i := r; i < len(ct); i += R {
			a += ct[i] * p[i]
		}
		sc.gram[r*stride+at] = a
	}
}

// symPacked is the length of a symmetric n x n matrix packed by columns of its upper triangle:
// entry (i, j), i <= j, at j(j+1)/2 + i.
func symPacked(n int) int { return n * (n + 1) / 2 }

// symMulPacked sets m = G·v for the symmetric G packed as symPacked says.
func symMulPacked(m, G, v []float64) {
	clear(m)
	for j, vj := range v {
		col := G[j*(j+1)/2 : j*(j+1)/2+j+1]
		sum := 0.0
		for i, gij := range col[:j] {
			m[i] += gij * vj
			sum += gij * v[i]
		}
		m[j] += sum + col[j]*vj
	}
}

// codeGroupDots sets out[g] = Σ over the columns k of group g of codes[k]·v[k].
func codeGroupDots(out []float64, codes []int8, v []float64, g int) {
	clear(out)
	for k, c := range codes {
		out[k/g] += float64(c) * v[k]
	}
}

// refit runs the rounds of WithScaleRefit on st's weight (GPTQ's codes and scales chosen by st.rows).
// Each refit also gives every row's error with its new scales, which is what the rounds compare.
func (st *gptqState) refit(ctx context.Context, rounds int) error {
	w, kp := st.w, st.w.KP
	if st.hdiag == nil {
		return fmt.Errorf("scale refit without the Hessian kept below the factor: %w", ErrParam)
	}
	dead := make([]bool, kp)
	for k, d := range st.diag {
		dead[k] = d == 0
	}
	hb := hessBuffer{a: st.U, diag: st.hdiag, kp: kp}
	ng, g := w.Groups(), effGroup(kp, w.Group)
	tp, err := targetTimesH(ctx, st.data, hb, dead, w.N, st.c.workers)
	if err != nil {
		return err
	}
	scratch := sync.Pool{New: func() any { return newRefitScratch(kp, ng, g) }}
	refitAll := func(errs []float64) error {
		return forRows(ctx, w.N, st.c.workers, func(lo, hi int) {
			sc := scratch.Get().(*refitScratch)
			defer scratch.Put(sc)
			refitScales(w, tp, hb, st.diag, lo, hi, st.c.refitSteps, errs, sc)
		})
	}
	prevErr := make([]float64, w.N)
	if err := refitAll(prevErr); err != nil {
		return err
	}
	if rounds == 1 {
		return nil
	}
	newErr := make([]float64, w.N)
	for round := 1; round < rounds; round++ {
		prevCodes := append([]int8(nil), w.Codes...)
		prevScales := append([]float32(nil), w.Scales...)
		st.fixedScales = true
		err := forRows(ctx, w.N, st.c.workers, st.rows)
		st.fixedScales = false
		if err != nil {
			return err
		}
		if err := refitAll(newErr); err != nil {
			return err
		}
		for r := 0; r < w.N; r++ {
			if !(newErr[r] < prevErr[r]) {
				copy(w.Codes[r*kp:(r+1)*kp], prevCodes[r*kp:(r+1)*kp])
				copy(w.Scales[r*ng:(r+1)*ng], prevScales[r*ng:(r+1)*ng])
				newErr[r] = prevErr[r]
			}
		}
		prevErr, newErr = newErr, prevErr
	}
	return nil
}
