package quant

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sort"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// GPTQ quantizes m (N x K) against the Hessian h (K x K) as IST-DASLab's gptq.py does (see the
// package doc), with the clip search (weighted by diag(H), or by the GPTQ loss with
// WithScaleSearch(ScaleSearchGPTQ); negative scales with WithNegativeScales) choosing each scale. Rows are
// independent given H⁻¹, so they are processed in parallel chunks (WithWorkers). A Hessian that
// stays not positive definite after every damping retry is ErrCholesky naming m.Name. ctx is
// checked between the blocks of the factorisations and per block of columns; a cancelled run
// returns ctx.Err() (wrapped with m.Name).
//
// The factorisation and the row phase each run on every core, one such phase of the process at
// a time (holdCores): concurrent GPTQs take turns phase by phase.
//
// h is never modified. Peak memory is GPTQMemory: one KP x KP float64 buffer (H, reflected, factored
// and, for the direct row phase, turned into M = U⁻¹ with blocks of products in place, or inverted
// in place into U), the codes and scales, the float32 rotated copy of m when
// rotated, and float64 working rows for the chunks in flight only; WithQuantizedInputs adds
// InputsMemory.
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
	if !c.hChecked {
		if err := h.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Name, err)
		}
	}
	if h.K != m.Cols {
		return nil, fmt.Errorf("%s: Hessian is %dx%d, weight has K=%d: %w", m.Name, h.K, h.K, m.Cols, ErrShape)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	if c.rotSearch > 1 {
		return gptqRotationSearch(ctx, m, h, c, opts)
	}
	w, data, err := prepare(m, c)
	if err != nil {
		return nil, err
	}
	hsrc := rotatedHessian(w, h, c.consumeH, c.workers)
	kp := w.KP
	H := hsrc
	if w.Rotation.IsZero() && !c.consumeH {
		H = append([]float64(nil), hsrc...) // the one KP x KP buffer; never modify the caller's Hessian
	} // else hsrc is rotatedHessian's fresh copy, or the caller's data it handed over (WithConsumeHessian)
	var in *inputsState
	if c.inputs != nil {
		if c.actOrder {
			return nil, fmt.Errorf("%s: act-order with quantized inputs: %w (the permutation would have to follow the input target)", m.Name, ErrParam)
		}
		err := onCores(ctx, m.Name, func() (err error) { // the sample's products run on every core (BLAS)
			if in, err = c.inputs.prepare(ctx, m.Name, w, data, h.Tokens); err == nil {
				in.correctHessian(H, kp)
				w.InputClip = in.clip
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	diag0 := make([]float64, kp)
	for k := range diag0 {
		diag0[k] = H[k*kp+k]
	}
	// Dead columns: an input that is always zero carries no information; pin its weight to 0
	// (done per row chunk in rows, from diag0).
	for k := 0; k < kp; k++ {
		if H[k*kp+k] == 0 {
			H[k*kp+k] = 1
		}
	}
	g := effGroup(kp, w.Group)
	ng := w.Groups()
	static := c.staticGroups || w.Group == 0
	perm := identityPerm(kp)
	if c.actOrder {
		sort.SliceStable(perm, func(a, b int) bool { return diag0[perm[a]] > diag0[perm[b]] })
		permuteSymInPlace(H, kp, perm)
	}
	var damp float64
	var hdiag []float64 // WithScaleRefit: H's damped diagonal; H stays below U's diagonal
	if c.refit > 0 {
		hdiag = make([]float64, kp)
	}
	// The direct row phase (gptq_direct.go) needs M = U⁻¹ and U's diagonal blocks, not U.
	direct := useDirect(c, g, static)
	factor := invCholUpper
	if direct {
		factor = reflectedCholUpper
	}
	var ud []float64
	err = onCores(ctx, m.Name, func() (err error) {
		if damp, err = dampedFactor(ctx, H, kp, c, hdiag, factor); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		if direct {
			if ud, err = directFactor(ctx, H, kp, c.blockSize); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if damp != c.percDamp {
		slog.Debug("gptq: damping raised", "weight", m.Name, "percdamp", damp)
	}
	orig := data
	if in != nil && c.inputs.target == InputsAsymmetric {
		err = onCores(ctx, m.Name, func() (err error) {
			if data, err = in.asymmetricTarget(ctx, data, w.N, kp, H); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	plain := !c.actOrder
	for _, d := range diag0 {
		plain = plain && d != 0
	}
	st := &gptqState{ctx: ctx, w: w, data: data, U: H, ud: ud, plain: plain, hdiag: hdiag, perm: perm, diag: diag0, g: g, ng: ng, static: static, c: c,
		bufs: make(chan []float64, max(1, c.workers)), factors: c.scaleFactors()}
	rows := func() error {
		defer singleThreadedBLAS()() // the row chunks run on c.workers goroutines already
		phase := st.rows
		if direct {
			phase = st.rowsDirect
		}
		if err := forRows(ctx, w.N, c.workers, phase); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		return nil
	}
	if c.workers > 1 {
		err = onCores(ctx, m.Name, rows)
	} else {
		err = rows()
	}
	if err != nil {
		return nil, err
	}
	if c.refit > 0 {
		err = onCores(ctx, m.Name, func() error {
			defer singleThreadedBLAS()()
			if err := st.refit(ctx, c.refit); err != nil {
				return fmt.Errorf("%s: scale refit: %w", m.Name, err)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	w.QErr = weightedRelErr(w, orig, diag0)
	return w, nil
}

// GPTQMemory is the peak memory in bytes that GPTQ allocates for an n x k weight whose rows are padded to
// kp (kp = k without rotation) with group size group (0: per row), rotated or not (a rotation need not pad:
// kp = k for k a multiple of 32), not counting the caller's weight and Hessian: the KP x KP float64 buffer
// that holds H and then, in place, the factor the row phase reads (KP²·8); the inverses of its diagonal
// blocks for the direct row phase (KP·128·8); the codes (N·KP) and scales; the float32 rotated copy of the
// weight when rotated (N·KP·4); the float64 working rows of the row chunks in flight (at most N/4 + workers
// rows of KP + 3 · block size values, workers = GOMAXPROCS by default); O(KP) vectors; directFactor's 512 x
// 128 panels (one a goroutine, GOMAXPROCS); and 64 MiB + 16 MiB per GOMAXPROCS for the runtime and BLAS
// workspaces. For K = 17408, N = 5120, G32, no rotation, on 2 cores that is about 2.26 + 0.02 + 0.09 + 0.01
// + 0.17 + 0.09 ≈ 2.63 GiB; rotated, 0.33 GiB more.
func GPTQMemory(n, k, kp, group int, rotated bool) int64 {
	N, KP := int64(n), int64(kp)
	ng := int64(1)
	if group > 0 {
		ng = (KP + int64(group) - 1) / int64(group)
	}
	b := KP*KP*8 + N*KP + N*ng*4
	if rotated || kp != k {
		b += N * KP * 4
	}
	rows := min(N, N/4+int64(runtime.GOMAXPROCS(0)))
	b += rows * (KP + 3*128) * 8
	b += KP * 128 * 8                                     // directFactor's diagonal blocks
	b += 16*KP*8 + int64(runtime.GOMAXPROCS(0))*512*128*8 // vectors; directFactor's panels, one a goroutine
	return b + 64<<20 + int64(runtime.GOMAXPROCS(0))*16<<20
}

type gptqState struct {
	ctx     context.Context
	w       *Weight
	data    []float32 // [N][KP] the (rotated) weights, natural column order
	bufs    chan []float64
	U       []float64 // upper Cholesky factor of H⁻¹ (permuted), row-major KP x KP, or with ud its inverse M; with hdiag, H below its diagonal
	ud      []float64 // the direct row phase's U diagonal blocks (directFactor), else nil
	plain   bool      // no act order and no dead column: the rows' values are data's as they are
	hdiag   []float64 // WithScaleRefit: the diagonal of the damped H that was factored (nil without)
	perm    []int     // permuted column -> natural column
	diag    []float64 // natural-order diag(H) before damping, for the clip search
	g, ng   int
	static  bool
	c       *config
	factors []float64 // c.scaleFactors()
	// fixedScales (WithScaleRefit's later rounds): the row phase keeps w.Scales and only chooses codes.
	fixedScales bool
}

// rows runs GPTQ on rows [lo, hi): each row only needs U, so chunks are independent.
func (s *gptqState) rows(lo, hi int) {
	w, kp, bs := s.w, s.w.KP, s.c.blockSize
	nr := hi - lo
	buf := s.chunkBuf(nr*(kp+bs) + 8*s.g)
	defer s.putChunkBuf(buf)
	Wc := buf[:nr*kp]
	err1 := buf[nr*kp : nr*(kp+bs)]
	clear(err1)
	sbuf := buf[nr*(kp+bs) : nr*(kp+bs)+8*s.g] // chooseScaleGPTQ's scratch (eight candidates at a time)
	cs := newClipScratch(len(s.factors))       // chooseScale's, for every group of the chunk
	s.loadRows(Wc, lo, hi, cs)
	lov, hiv := codeRange(w.Bits)
	for i1 := 0; i1 < kp; i1 += bs {
		if s.ctx.Err() != nil {
			return // forRows reports ctx.Err()
		}
		i2 := min(i1+bs, kp)
		done := i1 // columns [i1, done) have already pushed their errors to W[:, i2:]
		for i := i1; i < i2; i++ {
			urow := s.U[i*kp : (i+1)*kp]
			d := urow[i]
			nat := s.perm[i]
			if !s.static && !s.fixedScales && i%s.g == 0 { // dynamic group scale from the current weights
				end := min(i+s.g, kp)
				if end > i2 && i > done {
					// the group reaches past the block: bring its columns up to date first
					s.lazyUpdate(Wc, err1, nr, i1, done, i, i2)
					done = i
				}
				gi := i / s.g
				for r := 0; r < nr; r++ {
					row := Wc[r*kp : (r+1)*kp]
					if s.c.scaleSearch == ScaleSearchGPTQ {
						w.Scales[(lo+r)*s.ng+gi] = chooseScaleGPTQ(row[i:end], s.U, kp, i, w.Bits, s.factors, sbuf)
					} else {
						w.Scales[(lo+r)*s.ng+gi] = chooseScale(row[i:end], s.diag[i:end], w.Bits, s.factors, cs)
					}
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
					subScaled(row[i+1:i2], urow[i+1:i2], e)
				}
			}
		}
		s.lazyUpdate(Wc, err1, nr, i1, done, i2, i2)
	}
}

// chunkBuf returns a working buffer of at least n values for a row chunk: one an earlier chunk gave
// back (putChunkBuf), or a new one.
func (s *gptqState) chunkBuf(n int) []float64 {
	var buf []float64
	select {
	case buf = <-s.bufs:
	default:
	}
	if cap(buf) < n {
		buf = make([]float64, n)
	}
	return buf
}

// putChunkBuf keeps buf for a later chunk (at most as many as the channel holds).
func (s *gptqState) putChunkBuf(buf []float64) {
	select {
	case s.bufs <- buf:
	default:
	}
}

// loadRows fills Wc with rows [lo, hi) of the weights as float64, dead columns (diag(H) = 0)
// zeroed, sets their static scales (from these values, before any update) and permutes their
// columns into act order.
func (s *gptqState) loadRows(Wc []float64, lo, hi int, cs *clipScratch) {
	w, kp := s.w, s.w.KP
	var tmp []float64
	if s.c.actOrder {
		tmp = make([]float64, kp)
	}
	for r := 0; r < hi-lo; r++ {
		row := Wc[r*kp : (r+1)*kp]
		for k, v := range s.data[(lo+r)*kp : (lo+r+1)*kp] {
			row[k] = float64(v)
			if s.diag[k] == 0 {
				row[k] = 0
			}
		}
		if s.static && !s.fixedScales {
			for gi := 0; gi < s.ng; gi++ {
				a, b := gi*s.g, min((gi+1)*s.g, kp)
				w.Scales[(lo+r)*s.ng+gi] = chooseScale(row[a:b], s.diag[a:b], w.Bits, s.factors, cs)
			}
		}
		if tmp != nil {
			copy(tmp, row)
			for j, p := range s.perm {
				row[j] = tmp[p]
			}
		}
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

// permuteSymInPlace replaces the k x k H by H[perm][:, perm] with O(k) extra memory: rows
// along the cycles of perm, then each row's columns through a scratch row.
func permuteSymInPlace(H []float64, k int, perm []int) {
	tmp := make([]float64, k)
	done := make([]bool, k)
	for start := range perm {
		if done[start] || perm[start] == start {
			done[start] = true
			continue
		}
		// new row i = old row perm[i]: walk i -> perm[i] saving the first row
		copy(tmp, H[start*k:(start+1)*k])
		i := start
		for {
			done[i] = true
			src := perm[i]
			if src == start {
				copy(H[i*k:(i+1)*k], tmp)
				break
			}
			copy(H[i*k:(i+1)*k], H[src*k:(src+1)*k])
			i = src
		}
	}
	for i := 0; i < k; i++ {
		row := H[i*k : (i+1)*k]
		copy(tmp, row)
		for j, p := range perm {
			row[j] = tmp[p]
		}
	}
}
