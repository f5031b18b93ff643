package quant

import (
	"context"
	"fmt"
	"runtime"

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

// WithScaleRefit makes GPTQ refit every row's group scales after its codes are chosen, codes fixed, to
// minimise the calibrated output error (w − q)ᵀ·H·(w − q) of the row (H the damped Hessian GPTQ
// factored, w the row GPTQ quantized: the float weight, rotated when the weight is, or the
// asymmetric target of WithQuantizedInputs). The scales of one row are the unknowns of a small
// least-squares problem, one per group: solved by preconditioned conjugate gradients from GPTQ's
// scales, each step one product with H through GPTQ's own factor U of H⁻¹ (H = U⁻¹·U⁻ᵀ: two
// triangular solves, no second K x K matrix). Each step lowers the row's error, so the refit never
// does worse than GPTQ's scales on H. rounds > 1 alternates: GPTQ chooses the codes again with the
// refitted scales fixed, the scales are refitted to those codes, and each row keeps whichever
// codes and scales have the lower error. Each refit takes at most steps conjugate-gradient steps a
// row (DefaultRefitSteps is the build's). rounds 0 (default) is off, and then steps must be 0 too.
// Not with act-order (U is permuted).
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
// group: per worker two blocks of refitBlock rows of kp float64 values and the rows' per-group
// vectors; with more than one round, a copy of the codes and scales, two errors per row and the
// float64 rows of the error chunks in flight.
func RefitMemory(n, kp, group, rounds int) int64 {
	if rounds <= 0 {
		return 0
	}
	ng := int64(numGroups(kp, group))
	b := int64(runtime.GOMAXPROCS(0)) * (2*refitBlock*int64(kp)*8 + 5*refitBlock*ng*8)
	if rounds > 1 {
		b += int64(n)*int64(kp) + int64(n)*ng*4 + 2*int64(n)*8
		b += (int64(n)/4 + int64(runtime.GOMAXPROCS(0))) * int64(kp) * 8 // rowErrors' chunks in flight: float64 rows
	}
	return b
}

// refitBlock is the number of rows whose products with H are taken together.
const refitBlock = 32

// refitScales refits the scales of rows [lo, hi) of w to target (N x KP; its dead columns, dead[k],
// count as zero, as GPTQ's codes there are), U the upper factor of H⁻¹ = UᵀU in natural column order
// (row-major), diag = diag(H) for the Jacobi preconditioner c_gᵀ·diag(H)·c_g of each group's scale.
// A group whose preconditioner is 0 (all its codes zero, or dead) keeps its scale. Each row takes at
// most steps conjugate-gradient steps.
func refitScales(w *Weight, target []float32, U []float64, diag []float64, lo, hi int, dead []bool, steps int) {
	kp, ng := w.KP, w.Groups()
	g := effGroup(kp, w.Group)
	B := min(refitBlock, hi-lo)
	x := make([]float64, B*kp)  // weight-space vectors, one per row
	hx := make([]float64, B*kp) // their products with H
	s := make([]float64, B*ng)  // scales
	rho := make([]float64, B*ng)
	z := make([]float64, B*ng)
	p := make([]float64, B*ng)
	pre := make([]float64, B*ng)
	rz := make([]float64, B)
	active := make([]bool, B)
	for r0 := lo; r0 < hi; r0 += B {
		nb := min(B, hi-r0)
		// residual vectors x = w − A·s and the preconditioner c_gᵀ·diag(H)·c_g
		for r := 0; r < nb; r++ {
			row := r0 + r
			codes := w.Codes[row*kp : (row+1)*kp]
			tr := target[row*kp : (row+1)*kp]
			xr := x[r*kp : (r+1)*kp]
			for gi := 0; gi < ng; gi++ {
				sc := float64(w.Scales[row*ng+gi])
				s[r*ng+gi] = sc
				a, b := gi*g, min((gi+1)*g, kp)
				d := 0.0
				for k := a; k < b; k++ {
					c := float64(codes[k])
					t := float64(tr[k])
					if dead[k] {
						t = 0
					}
					xr[k] = t - sc*c
					d += c * c * diag[k]
				}
				pre[r*ng+gi] = d
			}
		}
		hProduct(U, kp, x[:nb*kp], hx[:nb*kp], nb)
		for r := 0; r < nb; r++ {
			row := r0 + r
			codes := w.Codes[row*kp : (row+1)*kp]
			codeGroupDots(rho[r*ng:(r+1)*ng], codes, hx[r*kp:(r+1)*kp], g)
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
		iters := min(ng, steps)
		for it := 0; it < iters; it++ {
			any := false
			for r := 0; r < nb; r++ {
				xr := x[r*kp : (r+1)*kp]
				clear(xr)
				if !active[r] {
					continue
				}
				any = true
				codes := w.Codes[(r0+r)*kp : (r0+r+1)*kp]
				for k, c := range codes {
					xr[k] = p[r*ng+k/g] * float64(c)
				}
			}
			if !any {
				break
			}
			hProduct(U, kp, x[:nb*kp], hx[:nb*kp], nb)
			for r := 0; r < nb; r++ {
				if !active[r] {
					continue
				}
				codes := w.Codes[(r0+r)*kp : (r0+r+1)*kp]
				mp := z[r*ng : (r+1)*ng] // reuse z as M·p, recomputed below
				codeGroupDots(mp, codes, hx[r*kp:(r+1)*kp], g)
				pmp := 0.0
				for gi := 0; gi < ng; gi++ {
					pmp += p[r*ng+gi] * mp[gi]
				}
				if !(pmp > 0) {
					active[r] = false
					continue
				}
				alpha := rz[r] / pmp
				rzNew := 0.0
				for gi := 0; gi < ng; gi++ {
					i := r*ng + gi
					s[i] += alpha * p[i]
					rho[i] -= alpha * mp[gi]
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
		}
		for r := 0; r < nb; r++ {
			for gi := 0; gi < ng; gi++ {
				w.Scales[(r0+r)*ng+gi] = float32(s[r*ng+gi])
			}
		}
	}
}

// codeGroupDots sets out[g] = Σ over the columns k of group g of codes[k]·v[k].
func codeGroupDots(out []float64, codes []int8, v []float64, g int) {
	clear(out)
	for k, c := range codes {
		out[k/g] += float64(c) * v[k]
	}
}

// hProduct sets hx = x·H for nb rows of kp values, H = U⁻¹·U⁻ᵀ with U the upper triangular factor of
// H⁻¹ = UᵀU (row-major): x·U⁻¹ then ·U⁻ᵀ, two triangular solves.
func hProduct(U []float64, kp int, x, hx []float64, nb int) {
	copy(hx, x)
	t := blas64.Triangular{Uplo: blas.Upper, Diag: blas.NonUnit, N: kp, Stride: kp, Data: U}
	b := blas64.General{Rows: nb, Cols: kp, Stride: kp, Data: hx}
	blas64.Trsm(blas.Right, blas.NoTrans, 1, t, b) // Y·U = X
	blas64.Trsm(blas.Right, blas.Trans, 1, t, b)   // Z·Uᵀ = Y
}

// rowErrors sets e[r] = (t − q)·H·(t − q)ᵀ for rows [lo, hi) of w against target (dead columns zero).
func rowErrors(w *Weight, target []float32, U []float64, dead []bool, lo, hi int, e []float64) {
	kp, ng := w.KP, w.Groups()
	g := effGroup(kp, w.Group)
	x := make([]float64, (hi-lo)*kp)
	for r := range hi - lo {
		row := lo + r
		for k := 0; k < kp; k++ {
			t := float64(target[row*kp+k])
			if dead[k] {
				t = 0
			}
			x[r*kp+k] = t - float64(w.Scales[row*ng+k/g])*float64(w.Codes[row*kp+k])
		}
	}
	// e = ‖x·U⁻¹‖² per row: xHxᵀ = x·U⁻¹·(x·U⁻¹)ᵀ
	t := blas64.Triangular{Uplo: blas.Upper, Diag: blas.NonUnit, N: kp, Stride: kp, Data: U}
	blas64.Trsm(blas.Right, blas.NoTrans, 1, t, blas64.General{Rows: hi - lo, Cols: kp, Stride: kp, Data: x})
	for r := range hi - lo {
		v := 0.0
		for _, y := range x[r*kp : (r+1)*kp] {
			v += y * y
		}
		e[lo+r] = v
	}
}

// refit runs the rounds of WithScaleRefit on st's weight (GPTQ's codes and scales chosen by st.rows).
func (st *gptqState) refit(ctx context.Context, rounds int) error {
	w, kp := st.w, st.w.KP
	dead := make([]bool, kp)
	for k, d := range st.diag {
		dead[k] = d == 0
	}
	refitAll := func() error {
		return forRows(ctx, w.N, st.c.workers, func(lo, hi int) {
			refitScales(w, st.data, st.U, st.diag, lo, hi, dead, st.c.refitSteps)
		})
	}
	if err := refitAll(); err != nil {
		return err
	}
	for round := 1; round < rounds; round++ {
		prevCodes := append([]int8(nil), w.Codes...)
		prevScales := append([]float32(nil), w.Scales...)
		prevErr := make([]float64, w.N)
		if err := forRows(ctx, w.N, st.c.workers, func(lo, hi int) { rowErrors(w, st.data, st.U, dead, lo, hi, prevErr) }); err != nil {
			return err
		}
		st.fixedScales = true
		err := forRows(ctx, w.N, st.c.workers, st.rows)
		st.fixedScales = false
		if err != nil {
			return err
		}
		if err := refitAll(); err != nil {
			return err
		}
		newErr := make([]float64, w.N)
		if err := forRows(ctx, w.N, st.c.workers, func(lo, hi int) { rowErrors(w, st.data, st.U, dead, lo, hi, newErr) }); err != nil {
			return err
		}
		ng := w.Groups()
		for r := 0; r < w.N; r++ {
			if !(newErr[r] < prevErr[r]) {
				copy(w.Codes[r*kp:(r+1)*kp], prevCodes[r*kp:(r+1)*kp])
				copy(w.Scales[r*ng:(r+1)*ng], prevScales[r*ng:(r+1)*ng])
			}
		}
	}
	return nil
}
