package calib

import (
	"context"
	"fmt"
	"runtime"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	"orkpipe/internal/hugebuf"
	"orkpipe/ork/model"
)

// pendingUpdate is a Hessian's last update, left to the writer of its file (CaptureDeferred): rows
// activation rows of K values, added to the upper triangle only as Encoder encodes its values, never
// to Data.
type pendingUpdate struct {
	x     []float64 // rows·K values
	free  func()    // releases x (the row batch's buffer), or nil
	rows  int
	prior bool // Data's upper triangle holds earlier updates; else Data was never written (all zeros)
}

// CaptureDeferred is CaptureUpper (CaptureUpperSampled when s is not nil) for a caller that only writes
// the Hessians' files: each Hessian's last update (the rows gathered since its last flush, at most
// BatchRows) is left pending instead of added to Data, and Result.Encoder adds it band by band while it
// encodes the file. A Hessian whose rows all fit one update (at most BatchRows tokens) is thus never
// written, nor even allocated (its Data is nil): its values exist only in the encoder's scratch and the
// file. Data and Tokens of such a Result are not a Hessian's until encoded: read the files, not the
// matrices. The bytes the encoders give are EncodeHessian's of CaptureUpper's Hessians, bit for bit
// (TestCaptureDeferredBytes): the same products summed in the same order. The pending rows lie outside
// the Go heap when large (internal/hugebuf): call Result.Release once every file is written.
func CaptureDeferred(ctx context.Context, m *model.Model, w Window, in HiddenSource, out *HiddenWriter, s *ActSampler) (*Result, error) {
	if s == nil {
		return capture(ctx, m, w, in, out, finishDeferred, nil)
	}
	if !s.w.sameBlocks(w) {
		return nil, fmt.Errorf("activation sampler for another window than [%d, %d): %w", w.Start, w.End, ErrShape)
	}
	res, err := capture(ctx, m, w, in, out, finishDeferred, s)
	if err == nil {
		err = s.Err()
	}
	return res, err
}

// deferLast moves a's pending rows (if its batch holds any) into r.pending instead of flushing them. At
// the end of a capture every batch has at most one owner, so the pending updates never share a buffer.
func (r *Result) deferLast(a *accumulator) {
	b := a.batch
	if b.owner != a {
		return
	}
	if b.rows > 0 {
		if r.pending == nil {
			r.pending = map[*Hessian]*pendingUpdate{}
		}
		r.pending[a.h] = &pendingUpdate{x: b.x[:b.rows*a.h.K], free: b.free, rows: b.rows, prior: a.h.Tokens > 0}
		a.h.Tokens += int64(b.rows)
		b.x, b.pack, b.free = nil, nil, nil // the buffer now belongs to the pending update
	}
	b.release()
	b.rows, b.owner = 0, nil
}

// sparseHessian is a Hessian whose Data CaptureDeferred made outside the Go heap, and its free.
type sparseHessian struct {
	h    *Hessian
	free func()
}

// allocData gives h (one of r's, none yet) its zeroed K × K Data in a sparse mapping
// (hugebuf.MakeSparse: not cleared on allocation, as a recycled heap span of 2.4 GB for a 17408-wide
// input is, by one goroutine; only the pages the updates touch, about the upper triangle, are
// backed). Release frees it.
func (r *Result) allocData(h *Hessian) {
	buf, free := hugebuf.MakeSparse[float64](h.K * h.K)
	h.Data = buf
	r.sparse = append(r.sparse, sparseHessian{h, free})
}

// Release frees the buffers of the pending updates and the Hessians' matrices made outside the Go
// heap (CaptureDeferred's, when large: their Data becomes nil). Call it once every file is encoded: no
// Encoder of r may run afterwards, and the Hessians' Data must not be used. A Result never released
// frees them when the collector finds it unreachable (its Encoders keep it reachable).
func (r *Result) Release() {
	for _, p := range r.pending {
		if p.free != nil {
			p.free()
		}
	}
	for _, s := range r.sparse {
		s.free()
		s.h.Data = nil
	}
}

// releaseWithResult makes the collector free r's pending buffers and sparse matrices once r (and
// every Encoder of it) is unreachable, for a caller that never calls Release.
func (r *Result) releaseWithResult() {
	var frees []func()
	for _, p := range r.pending {
		if p.free != nil {
			frees = append(frees, p.free)
		}
	}
	for _, s := range r.sparse {
		frees = append(frees, func() { s.free(); s.h.Data = nil })
	}
	if len(frees) > 0 {
		runtime.AddCleanup(r, func(frees []func()) {
			for _, f := range frees {
				f()
			}
		}, frees)
	}
}

// Encoder encodes byte ranges of the Hessian file of one of a Result's Hessians, adding its pending
// update (CaptureDeferred) as it goes. An Encoder keeps scratch memory between calls (at most
// encodeBand × encodeCols float64s, 8 MiB, outside the Go heap: free it with Release, or the collector
// does once the Encoder is unreachable): one per goroutine; several may encode ranges of one file at
// once. EstimateMemory does not count the scratch apart: it counts each Hessian's whole 8·K² bytes, of
// which at most the upper half is ever resident (none when the only update is pending), and the
// calibrate stage's writers, one file at a time, hold GOMAXPROCS encoders at most.
type Encoder struct {
	r       *Result // keeps the Result, whose cleanup frees the pending rows, reachable
	h       *Hessian
	p       *pendingUpdate
	scratch []float64
	free    func() // releases scratch (hugebuf), or nil
}

// Release frees the encoder's scratch; the encoder may still be used (it makes a new one).
func (e *Encoder) Release() {
	if e.free != nil {
		e.free()
	}
	e.scratch, e.free = nil, nil
}

// Encoder returns an encoder of h's file (h one of r's Hessians).
func (r *Result) Encoder(h *Hessian) *Encoder { return &Encoder{r: r, h: h, p: r.pending[h]} }

// encodeBand and encodeCols bound the block of values one product of the pending update computes:
// rows [r0, r0+encodeBand) by columns [c0, c0+encodeCols). OpenBLAS packs both operands of every call,
// so a block of about a thousand rows and columns keeps that copying small beside its multiply-adds (as
// syrkUpper's tiles of 1024 do).
// (Variables so that tests can cut small matrices into many blocks.)
var (
	encodeBand = 512
	encodeCols = 2048
)

// Encode fills dst with bytes [off, off+len(dst)) of the Hessian's file, as EncodeHessian does for a
// complete Hessian (same contract, same checks, same bytes). With a pending update it computes the
// values of the rows the range touches — H[i][j] (+ Data's earlier sums) + Σ_t x[t][i]·x[t][j] — in
// blocks of encodeBand rows by encodeCols columns, each one product (the lower part of a block on the
// diagonal is computed and dropped), and encodes them from there.
func (e *Encoder) Encode(dst []byte, off int64) error {
	if e.p == nil {
		return EncodeHessian(e.h, dst, off)
	}
	// A Hessian whose only update is pending may have no Data (capture never allocated it).
	dst, i0, j0, err := encodeHeader(e.h, dst, off, e.p.prior || e.h.Data != nil)
	if err != nil || len(dst) == 0 {
		return err
	}
	k := e.h.K
	// The range holds values H[i0][j0] .. H[i1][j1-1] (row i1's values before column j1).
	end := rowStart(k, i0) + int64(j0-i0) + int64(len(dst)/4)
	i1 := i0
	for i1 < k && rowStart(k, i1+1) <= end {
		i1++
	}
	j1 := k
	if i1 < k {
		j1 = i1 + int(end-rowStart(k, i1))
	} else {
		i1 = k - 1
	}
	base := rowStart(k, i0) + int64(j0-i0) // value index of dst[0]
	for r0 := i0; r0 <= i1; r0 += encodeBand {
		r1 := min(r0+encodeBand, i1+1)
		for c0 := r0; c0 < k; c0 += encodeCols {
			c1 := min(c0+encodeCols, k)
			blk := e.block(r0, r1, c0, c1)
			for i := r0; i < r1; i++ {
				lo, hi := max(c0, i), c1 // row i's values in this block
				if i == i0 {
					lo = max(lo, j0)
				}
				if i == i1 {
					hi = min(hi, j1)
				}
				if lo >= hi {
					continue
				}
				at := 4 * (rowStart(k, i) + int64(lo-i) - base)
				if err := encodeValues(i, lo, blk[(i-r0)*(c1-c0)+lo-c0:(i-r0)*(c1-c0)+hi-c0], dst[at:at+4*int64(hi-lo)]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// block computes rows [r0, r1) × columns [c0, c1) of the Hessian with its pending update into the
// encoder's scratch (row-major, c1-c0 wide): one product, onto Data's values when it holds earlier
// updates, onto zeros otherwise. syrkUpper's tiles and these blocks run the same kernels over the same
// rows (OpenBLAS's, or the pure-Go build's Dgemm), so each value is the same sum in the same order.
func (e *Encoder) block(r0, r1, c0, c1 int) []float64 {
	k, p := e.h.K, e.p
	w := c1 - c0
	if e.scratch == nil {
		e.scratch, e.free = hugebuf.Make[float64](min(encodeBand, k) * min(encodeCols, k))
		runtime.AddCleanup(e, func(free func()) { free() }, e.free) // an Encoder never released
	}
	c := e.scratch[:(r1-r0)*w]
	beta := 0.0
	if p.prior {
		for i := r0; i < r1; i++ {
			copy(c[(i-r0)*w:(i-r0+1)*w], e.h.Data[i*k+c0:i*k+c1])
		}
		beta = 1
	}
	xr := blas64.General{Rows: p.rows, Cols: r1 - r0, Stride: k, Data: p.x[r0:]}
	xc := blas64.General{Rows: p.rows, Cols: w, Stride: k, Data: p.x[c0:]}
	blas64.Gemm(blas.Trans, blas.NoTrans, 1, xr, xc, beta, blas64.General{Rows: r1 - r0, Cols: w, Stride: w, Data: c})
	return c
}
