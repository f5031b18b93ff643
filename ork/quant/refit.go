package quant

import (
	"context"
	"fmt"
	"runtime"
	"sync"
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
// residual's product (t − A·s)·H; 3 takes t·H once for all the rounds, in blocks of targetBlock
// rows, and the residual's terms from it and the Gram matrix (AᵀH·x = AᵀH·t − AᵀHA·s), a third of
// a refit's flops; 4 forms each Gram entry from H's g x g block in one pass of fused multiply-adds
// in a fixed order (gramTile, where 3 took OpenBLAS's or gonum's products, whose rounding differed);
// 5 (this one) takes t·H the same way (symProducts, by 32 x 32 blocks, where 4 took two triangular
// products from OpenBLAS or gonum), so the refit's arithmetic is the same on every CPU and in both
// builds. The method and its results are the same up to rounding, which can still round a float32
// scale the other way.
const RefitVersion = 5

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
// worker a refitScratch and targetTimesH's symScratch (targetBlock rows' values and products, by
// columns); with more than one round, a copy of the codes and scales and two errors per row.
func RefitMemory(n, kp, group, rounds int) int64 {
	if rounds <= 0 {
		return 0
	}
	ng := int64(numGroups(kp, group))
	perWorker := refitScratchBytes(int64(kp), ng, int64(effGroup(kp, group)), int64(refitBlockRows(int(ng)))) + symScratchBytes(int64(kp), targetBlock)
	b := int64(runtime.GOMAXPROCS(0))*perWorker + 8*int64(n)*(int64(kp)+1)
	if rounds > 1 {
		b += int64(n)*int64(kp) + int64(n)*ng*4 + 2*int64(n)*8
	}
	return b
}

// refitBlock is the number of rows whose Gram matrices are formed together (refitBlockRows), unless
// their Gram matrices would pass refitGramBytes, then refitBlock/2; targetBlock the number of rows of
// the target whose product with H is taken together (targetTimesH: each of H's 32 x 32 blocks used
// for all of them while in the cache).
// Each H element the Gram products read is used once per row of the block (gramProducts; its AVX-512
// kernel ran at 33-35 GFLOP/s on one core for 64 rows of K = 17408, 41 with everything in the L1
// cache). Every row's result is the same for any block (TestRefitBlockRows).
const (
	refitBlock     = 64
	refitGramBytes = 96 << 20
	targetBlock    = 128
)

// refitBlockRows is the rows of a refit block for rows of ng groups: refitBlock while their packed
// Gram matrices stay within refitGramBytes (ng <= 626: K up to 20032 in groups of 32), else half.
func refitBlockRows(ng int) int {
	if refitBlock*8*symPacked(ng) > refitGramBytes {
		return refitBlock / 2
	}
	return refitBlock
}

// hessBuffer is GPTQ's KP x KP buffer as inverseCholeskyUpper leaves it when asked to keep H: the
// factor U of H⁻¹ on and above the diagonal (row-major), H strictly below it, and H's diagonal (the
// damped one, the matrix that was factored) beside it.
type hessBuffer struct {
	a    []float64
	diag []float64
	kp   int
}

// refitScratch is one worker's buffers for refitScales on a block of at most nb rows.
type refitScratch struct {
	nb   int
	cs   int       // the rows a column of c holds: nb rounded up to gramTileRows
	c    []float64 // the rows' codes by columns: code k of row r at c[k·cs + r], ng·g columns (zero past kp)
	d    []float64 // one g x g diagonal block of H (zero past the last group's end)
	out  []float64 // one block pair's Gram entries, cs rows
	gram []float64 // each row's Gram matrix AᵀHA, symmetric, packed (symPacked)
	vec  []float64 // eight per-group vectors a row
}

// refitScratchBytes is the size of a refitScratch for blocks of nb rows of kp values in ng groups of g.
func refitScratchBytes(kp, ng, g, nb int64) int64 {
	cs := int64(gramRows(int(nb)))
	return 8 * (ng*g*cs + g*g + cs + nb*int64(symPacked(int(ng))) + 8*nb*ng)
}

// newRefitScratch returns a refitScratch for blocks of nb rows (at most refitBlock).
func newRefitScratch(kp, ng, g, nb int) *refitScratch {
	cs := gramRows(nb)
	return &refitScratch{
		nb: nb, cs: cs,
		c: make([]float64, ng*g*cs), d: make([]float64, g*g), out: make([]float64, cs),
		gram: make([]float64, nb*symPacked(ng)), vec: make([]float64, 8*nb*ng),
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
// targetBlock on workers goroutines (symProducts, by 32 x 32 blocks of H's lower triangle).
func targetTimesH(ctx context.Context, target []float32, hb hessBuffer, dead []bool, n, workers int) (targetProducts, error) {
	kp := hb.kp
	tp := targetProducts{th: make([]float64, n*kp), tht: make([]float64, n)}
	pool := sync.Pool{New: func() any { return newSymScratch(kp, targetBlock) }}
	// whole blocks to each worker, whatever the number of workers
	err := forRows(ctx, (n+targetBlock-1)/targetBlock, workers, func(blo, bhi int) {
		sc := pool.Get().(*symScratch)
		defer pool.Put(sc)
		cs := sc.cs
		for r0 := blo * targetBlock; r0 < min(bhi*targetBlock, n); r0 += targetBlock {
			nb := min(targetBlock, n-r0)
			// sc.t's dead columns and those past kp are never written, so stay zero; its rows past nb
			// (a last short block) keep an earlier block's values, whose products are never read
			clear(sc.y)
			for r := 0; r < nb; r++ {
				for k, v := range target[(r0+r)*kp : (r0+r+1)*kp] {
					if !dead[k] {
						sc.t[k*cs+r] = float64(v)
					}
				}
			}
			symProducts(hb, sc, gramRows(nb))
			for r := 0; r < nb; r++ {
				hr := tp.th[(r0+r)*kp : (r0+r+1)*kp]
				e := 0.0
				for k := range hr {
					hr[k] = sc.y[k*cs+r]
					e += sc.t[k*cs+r] * hr[k]
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
// Per block of rows it forms the rows' Gram matrices AᵀHA (gramProducts: block pair by block pair
// of H, all the rows' entries of a pair at once): K² flops a row. The residual x = t − A·s₀ enters
// through AᵀH·x = AᵀH·t − AᵀHA·s₀ and xᵀHx = tᵀHt − 2s₀·AᵀHt + s₀ᵀAᵀHA·s₀. Then it runs the
// conjugate gradients on the Gram matrices (ng² a step) and takes the error from the same
// quantities: (x − A·δ)ᵀH(x − A·δ) = xᵀHx − 2δ·AᵀHx + δᵀ(AᵀHA)δ, δ the scales' change.
func refitScales(w *Weight, tp targetProducts, hb hessBuffer, diag []float64, lo, hi int, steps int, errs []float64, sc *refitScratch) {
	kp, ng := w.KP, w.Groups()
	g := effGroup(kp, w.Group)
	R := sc.nb
	v := sc.vec
	s, rho, z, p, pre, mp, g0, u := v[:R*ng], v[R*ng:2*R*ng], v[2*R*ng:3*R*ng], v[3*R*ng:4*R*ng], v[4*R*ng:5*R*ng], v[5*R*ng:6*R*ng], v[6*R*ng:7*R*ng], v[7*R*ng:8*R*ng]
	var rz, e0 [refitBlock]float64
	var active [refitBlock]bool
	for r0 := lo; r0 < hi; r0 += R {
		nb := min(R, hi-r0)
		// the scales, the codes, the preconditioner c_gᵀ·diag(H)·c_g
		for r := 0; r < nb; r++ {
			row := r0 + r
			codes := w.Codes[row*kp : (row+1)*kp]
			for gi := 0; gi < ng; gi++ {
				s[r*ng+gi] = float64(w.Scales[row*ng+gi])
				a, b := gi*g, min((gi+1)*g, kp)
				d := 0.0
				for k := a; k < b; k++ {
					c := float64(codes[k])
					sc.c[k*sc.cs+r] = c
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
	nb := refitBlockRows(ng)
	scratch := sync.Pool{New: func() any { return newRefitScratch(kp, ng, g, nb) }}
	refitAll := func(errs []float64) error {
		// whole blocks to each worker, whatever the number of workers
		return forRows(ctx, (w.N+nb-1)/nb, st.c.workers, func(lo, hi int) {
			sc := scratch.Get().(*refitScratch)
			defer scratch.Put(sc)
			refitScales(w, tp, hb, st.diag, lo*nb, min(hi*nb, w.N), st.c.refitSteps, errs, sc)
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
