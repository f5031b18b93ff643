package quant

import (
	"context"
	"runtime"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/gonum"

	"orkpipe/ork/internal/parallel"
)

// GPTQ's direct row phase: the same quantization from M = U⁻¹ (reflectedCholUpper) instead of U, the
// upper Cholesky factor of H⁻¹, so that the factorisation needs no triangular inverse (K³/3 flops
// less: for a 27B ffn_down, K = 17408, the inverse's 1.8e12 flops ran at half the rate of the other
// products and were a quarter of the finalize node's CPU).
//
// The row phase quantizes columns in order, each error e_i = (w'_i − q_i)/U_ii pushed onto the later
// columns (w'_j −= e_i·U_ij), so that with W the row's starting values, Q its quantized values and D =
// W − Q, D = E·U, that is E = D·M. For a block L of columns, the earlier blocks' errors have moved
// its starting values W_L to W'_L = W_L − E_<L·U_<L,L; from D_L = E_<L·U_<L,L + E_L·U_LL, E_L =
// D_<L·M_<L,L + D_L·M_LL and M_LL·U_LL = I, that is
//
//	W'_L = W_L + (D_<L·M_<L,L)·U_LL
//
// where U_LL, U's diagonal block, is the inverse of M's (a bs × bs triangular inverse per block).
// With P_B,L = M_B,L·U_LL (directFactor forms it in place of M above the diagonal blocks, K²·bs
// flops), W'_L = W_L + Σ_B<L D_B·P_B,L: the row chunk keeps T = Σ D_B·P_B,· for the columns not yet
// quantized, adding D_B·P_B,· after each block B (the product the lazy update ran with −E_B and
// U_B,·, the same flops), and starts block L from W_L + T_L; inside the block everything is the
// classic row phase on U_LL. The values differ from the classic phase's in rounding only: the same
// codes and scales on every weight tested (TestGPTQDirectMatchesClassic; the 27B-width slice's 15
// GPTQ weights byte for byte).
//
// The classic phase stays for what reads U beyond its diagonal blocks: the scale refit
// (WithScaleRefit) and the asymmetric input target (WithQuantizedInputs, InputsAsymmetric); and for
// dynamic groups that do not tile the block, whose scales read columns of later blocks.

// directPhase lets tests run the classic row phase where the direct one would run.
var directPhase = true

// useDirect reports whether GPTQ runs the direct row phase for c, with g the effective group size.
func useDirect(c *config, g int, static bool) bool {
	if !directPhase || c.refit > 0 || (c.inputs != nil && c.inputs.target == InputsAsymmetric) {
		return false
	}
	return static || (g <= c.blockSize && c.blockSize%g == 0)
}

// directFactor turns the kp x kp upper triangular M (row-major, rows kp apart) into what the direct
// row phase reads, in place: each block column L of bs columns (the last one shorter when bs does not
// divide kp) above the diagonal, M_<L,L, becomes P_<L,L = M_<L,L·U_LL, and the diagonal blocks' inverses
// U_LL are returned block after block, each bs x bs row-major (a short block in its top-left corner).
// M's diagonal blocks stay M's. K²·bs flops for the products (the triangular inverse this replaces:
// K³/3). ctx is checked between the panels; a cancelled run returns ctx.Err() with M garbage.
func directFactor(ctx context.Context, M []float64, kp, bs int) ([]float64, error) {
	nb := (kp + bs - 1) / bs
	ud := make([]float64, nb*bs*bs)
	impl := gonum.Implementation{}
	parallel.For(nb, runtime.GOMAXPROCS(0), func(b int) {
		i1 := b * bs
		n := min(bs, kp-i1)
		blk := ud[b*bs*bs : (b+1)*bs*bs]
		for r := range n {
			copy(blk[r*bs+r:r*bs+n], M[(i1+r)*kp+i1+r:(i1+r)*kp+i1+n])
		}
		impl.Dtrtri(blas.Upper, blas.NonUnit, n, blk, bs) // M's diagonal is positive: never singular
	})
	// The panels — block column b's rows [r0, r0+rows) above its diagonal block — are independent
	// (each reads its own values of M and U_bb and writes them back): GOMAXPROCS goroutines take them
	// in turn, each multiplying through a tmp of its own, one BLAS thread a call.
	const rows = 512 // rows of a panel multiplied at once, through tmp
	type panel struct{ b, r0 int }
	var panels []panel
	for b := 1; b < nb; b++ {
		for r0 := 0; r0 < b*bs; r0 += rows {
			panels = append(panels, panel{b, r0})
		}
	}
	defer singleThreadedBLAS()()
	tmps := make([][]float64, parallel.Workers(len(panels)))
	parallel.ForWorker(len(panels), len(tmps), func(w, p int) {
		if ctx.Err() != nil {
			return
		}
		if tmps[w] == nil {
			tmps[w] = make([]float64, rows*bs)
		}
		b, r0 := panels[p].b, panels[p].r0
		i1 := b * bs
		n, nr := min(bs, kp-i1), min(rows, i1-r0)
		pm := blas64.General{Rows: nr, Cols: n, Stride: kp, Data: M[r0*kp+i1:]}
		t := blas64.General{Rows: nr, Cols: n, Stride: n, Data: tmps[w]}
		blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, pm, blas64.General{Rows: n, Cols: n, Stride: bs, Data: ud[b*bs*bs:]}, 0, t)
		for r := range nr {
			copy(M[(r0+r)*kp+i1:(r0+r)*kp+i1+n], tmps[w][r*n:(r+1)*n])
		}
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return ud, nil
}

// rowsDirect is rows on the direct factor (directFactor: s.U holds P above M's diagonal blocks, s.ud
// U's diagonal blocks).
func (s *gptqState) rowsDirect(lo, hi int) {
	w, kp, bs := s.w, s.w.KP, s.c.blockSize
	nr := hi - lo
	buf := s.chunkBuf(nr*(kp+3*bs) + 8*s.g)
	defer s.putChunkBuf(buf)
	T := buf[:nr*kp]                               // Σ_B D_B·P_B,· for the columns not yet quantized
	orig := buf[nr*kp : nr*(kp+bs)]                // the block's starting values W_L, rows bs apart
	wb := buf[nr*(kp+bs) : nr*(kp+2*bs)]           // W'_L = W_L + T_L, updated in place as the block is quantized
	dq := buf[nr*(kp+2*bs) : nr*(kp+3*bs)]         // D_L = W_L − Q_L
	sbuf := buf[nr*(kp+3*bs) : nr*(kp+3*bs)+8*s.g] // chooseScaleGPTQ's scratch
	cs := newClipScratch(len(s.factors))
	if s.static && !s.fixedScales {
		s.loadRows(T, lo, hi, cs) // the static scales, from the rows' values
	}
	clear(T)
	lov, hiv := codeRange(w.Bits)
	for i1 := 0; i1 < kp; i1 += bs {
		if s.ctx.Err() != nil {
			return // forRows reports ctx.Err()
		}
		i2 := min(i1+bs, kp)
		n := i2 - i1
		ul := s.ud[i1/bs*bs*bs:]
		for r := range nr {
			o, t, x := orig[r*bs:r*bs+n], T[r*kp+i1:r*kp+i2], wb[r*bs:r*bs+n]
			if s.plain {
				for j, v := range s.data[(lo+r)*kp+i1 : (lo+r)*kp+i2] {
					o[j] = float64(v)
					x[j] = o[j] + t[j]
				}
				continue
			}
			for j := range o {
				nat := s.perm[i1+j]
				o[j] = 0
				if s.diag[nat] != 0 { // dead columns stay 0 (loadRows)
					o[j] = float64(s.data[(lo+r)*kp+nat])
				}
				x[j] = o[j] + t[j]
			}
		}
		for i := i1; i < i2; i++ {
			a := i - i1
			urow := ul[a*bs : a*bs+n]
			d := urow[a]
			nat := s.perm[i]
			if !s.static && !s.fixedScales && i%s.g == 0 { // dynamic group scale from the current weights
				end := min(i+s.g, kp) // within the block (useDirect)
				gi := i / s.g
				for r := range nr {
					row := wb[r*bs : r*bs+n]
					if s.c.scaleSearch == ScaleSearchGPTQ {
						w.Scales[(lo+r)*s.ng+gi] = chooseScaleGPTQ(row[a:end-i1], ul, bs, a, w.Bits, s.factors, sbuf)
					} else {
						w.Scales[(lo+r)*s.ng+gi] = chooseScale(row[a:end-i1], s.diag[i:end], w.Bits, s.factors, cs)
					}
				}
			}
			gi := nat / s.g
			for r := range nr {
				row := wb[r*bs : r*bs+n]
				sc := float64(w.Scales[(lo+r)*s.ng+gi])
				x := row[a]
				var code, q float64
				if sc != 0 {
					code = quantCode(x, 1/sc, float64(lov), float64(hiv))
					q = code * sc
				}
				w.Codes[(lo+r)*kp+nat] = int8(code)
				dq[r*bs+a] = orig[r*bs+a] - q
				if e := (x - q) / d; e != 0 {
					subScaled(row[a+1:n], urow[a+1:n], e)
				}
			}
		}
		// T_later += D_L·P_L,later.
		if i2 < kp {
			blas64.Gemm(blas.NoTrans, blas.NoTrans, 1,
				blas64.General{Rows: nr, Cols: n, Stride: bs, Data: dq},
				blas64.General{Rows: n, Cols: kp - i2, Stride: kp, Data: s.U[i1*kp+i2:]},
				1, blas64.General{Rows: nr, Cols: kp - i2, Stride: kp, Data: T[i2:]})
		}
	}
}
