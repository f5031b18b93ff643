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
// (this one) forms every row's Gram matrix AᵀHA from H once and steps with it. The method and its
// results are the same up to rounding, which can still round a float32 scale the other way.
const RefitVersion = 2

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
// group (refitScratch per worker); with more than one round, a copy of the codes and scales and two
// errors per row.
func RefitMemory(n, kp, group, rounds int) int64 {
	if rounds <= 0 {
		return 0
	}
	ng := int64(numGroups(kp, group))
	b := int64(runtime.GOMAXPROCS(0)) * refitScratchBytes(int64(kp), ng, int64(effGroup(kp, group)))
	if rounds > 1 {
		b += int64(n)*int64(kp) + int64(n)*ng*4 + 2*int64(n)*8
	}
	return b
}

// refitBlock is the number of rows whose products with H are taken together.
const refitBlock = 32

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
	x, hx []float64 // the rows' residuals t − A·s (rows x kp) and their products with H
	ct, p []float64 // the codes transposed (kp x refitBlock); H's column blocks times them, then a row block
	d     []float64 // one g x g diagonal block of H
	gram  []float64 // each row's Gram matrix AᵀHA, symmetric, packed (symPacked)
	vec   []float64 // seven per-group vectors a row
	acc   []float64
}

// refitScratchBytes is the size of a refitScratch for rows of kp values in ng groups of g.
func refitScratchBytes(kp, ng, g int64) int64 {
	return 8 * (4*refitBlock*kp + g*g + refitBlock*int64(symPacked(int(ng))) + 7*refitBlock*ng + refitBlock)
}

func newRefitScratch(kp, ng, g int) *refitScratch {
	return &refitScratch{
		x: make([]float64, refitBlock*kp), hx: make([]float64, refitBlock*kp),
		ct: make([]float64, kp*refitBlock), p: make([]float64, kp*refitBlock),
		d: make([]float64, g*g), gram: make([]float64, refitBlock*symPacked(ng)),
		vec: make([]float64, 7*refitBlock*ng), acc: make([]float64, refitBlock),
	}
}

// refitScales refits the scales of rows [lo, hi) of w to target (N x KP; its dead columns, dead[k],
// count as zero, as GPTQ's codes there are), H from hb, diag = diag(H) for the Jacobi preconditioner
// c_gᵀ·diag(H)·c_g of each group's scale. A group whose preconditioner is 0 (all its codes zero, or
// dead) keeps its scale. Each row takes at most steps conjugate-gradient steps. errs[r] (r in
// [lo, hi)) receives the row's error (t − q)ᵀ·H·(t − q) with its refitted float32 scales.
//
// Per block of rows it forms the residuals x = t − A·s₀, their products x·H (two triangular
// products with H's lower triangle) and the rows' Gram matrices AᵀHA (column block by column
// block of H, general matrix products one group wide): about 3·K² flops a row in all. Then it
// runs the conjugate gradients on the Gram matrices (ng² a step) and takes the error from the
// same quantities:
// (x − A·δ)ᵀH(x − A·δ) = xᵀHx − 2δ·AᵀHx + δᵀ(AᵀHA)δ, δ the scales' change.
func refitScales(w *Weight, target []float32, hb hessBuffer, diag []float64, lo, hi int, dead []bool, steps int, errs []float64, sc *refitScratch) {
	kp, ng := w.KP, w.Groups()
	g := effGroup(kp, w.Group)
	const R = refitBlock
	v := sc.vec
	s, rho, z, p, pre, mp, g0 := v[:R*ng], v[R*ng:2*R*ng], v[2*R*ng:3*R*ng], v[3*R*ng:4*R*ng], v[4*R*ng:5*R*ng], v[5*R*ng:6*R*ng], v[6*R*ng:7*R*ng]
	var rz, e0 [R]float64
	var active [R]bool
	for r0 := lo; r0 < hi; r0 += R {
		nb := min(R, hi-r0)
		// residual vectors x = t − A·s, the codes transposed, the preconditioner c_gᵀ·diag(H)·c_g
		for r := 0; r < nb; r++ {
			row := r0 + r
			codes := w.Codes[row*kp : (row+1)*kp]
			tr := target[row*kp : (row+1)*kp]
			xr := sc.x[r*kp : (r+1)*kp]
			for gi := 0; gi < ng; gi++ {
				scl := float64(w.Scales[row*ng+gi])
				s[r*ng+gi] = scl
				a, b := gi*g, min((gi+1)*g, kp)
				d := 0.0
				for k := a; k < b; k++ {
					c := float64(codes[k])
					t := float64(tr[k])
					if dead[k] {
						t = 0
					}
					xr[k] = t - scl*c
					sc.ct[k*R+r] = c
					d += c * c * diag[k]
				}
				pre[r*ng+gi] = d
			}
		}
		gramProducts(hb, sc, nb, ng, g)
		for r := 0; r < nb; r++ {
			codes := w.Codes[(r0+r)*kp : (r0+r+1)*kp]
			hxr := sc.hx[r*kp : (r+1)*kp]
			codeGroupDots(rho[r*ng:(r+1)*ng], codes, hxr, g)
			e := 0.0
			for k, xv := range sc.x[r*kp : (r+1)*kp] {
				e += xv * hxr[k]
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

// gramProducts sets, for the nb rows of sc.x (residuals) and sc.ct (their codes, transposed), each
// row's Gram matrix AᵀHA (sc.gram, packed) and sc.hx = x·H, H read from hb: the Gram matrices
// column block by column block (group h's columns: H[:h, h] is the transpose of group h's rows
// below the diagonal, H[h, h] is assembled into sc.d), x·H from the strict lower triangle L as
// x·(L+I) + x·(L+I)ᵀ − 2x + x·diag(H).
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
			acc := sc.acc[:nb]
			clear(acc)
			for k := hp * g; k < min((hp+1)*g, kp); k++ {
				ct, pk := sc.ct[k*R:k*R+nb], sc.p[k*R:k*R+nb]
				for r, c := range ct {
					acc[r] += c * pk[r]
				}
			}
			for r, v := range acc {
				sc.gram[r*symPacked(ng)+h*(h+1)/2+hp] = v
			}
		}
	}
	// x·H = x·(L+I) + x·(L+I)ᵀ − 2x + x·diag(H), L the strict lower triangle: two triangular
	// products with a unit diagonal, so U's diagonal in the buffer is never read
	x, hx, t := sc.x[:nb*kp], sc.hx[:nb*kp], sc.p[:nb*kp]
	copy(hx, x)
	copy(t, x)
	l := blas64.Triangular{Uplo: blas.Lower, Diag: blas.Unit, N: kp, Stride: kp, Data: a}
	blas64.Trmm(blas.Right, blas.NoTrans, 1, l, gen(nb, kp, kp, hx))
	blas64.Trmm(blas.Right, blas.Trans, 1, l, gen(nb, kp, kp, t))
	for r := 0; r < nb; r++ {
		xr, hr, tr := x[r*kp:(r+1)*kp], hx[r*kp:(r+1)*kp], t[r*kp:(r+1)*kp]
		for k, v := range xr {
			hr[k] += tr[k] - 2*v + v*hb.diag[k]
		}
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
	scratch := sync.Pool{New: func() any { return newRefitScratch(kp, ng, g) }}
	refitAll := func(errs []float64) error {
		return forRows(ctx, w.N, st.c.workers, func(lo, hi int) {
			sc := scratch.Get().(*refitScratch)
			defer scratch.Put(sc)
			refitScales(w, st.data, hb, st.diag, lo, hi, dead, st.c.refitSteps, errs, sc)
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
