package calib

import (
	"fmt"
	"math"
	"runtime"
	"sort"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	"orkpipe/internal/hugebuf"
	"orkpipe/ork/internal/dgemm"
	"orkpipe/ork/internal/parallel"
	"orkpipe/ork/quant"
)

// Hessian is Σ x·xᵀ over Tokens activation rows x of K values: float64, row-major K × K. It has the same
// fields as quant.Hessian, so quant.Hessian(*h) converts it.
type Hessian struct {
	K      int
	Data   []float64
	Tokens int64
}

// Empty reports whether no activation row was accumulated (Tokens = 0): the matrix is all zeros and
// carries no information (an MoE expert no calibration token was routed to).
func (h *Hessian) Empty() bool { return h.Tokens == 0 }

// NewHessian returns an empty K × K Hessian.
func NewHessian(k int) *Hessian { return &Hessian{K: k, Data: make([]float64, k*k)} }

// alloc gives a Hessian made without its matrix (capture's) its zeroed K × K Data, if it has none yet.
func (h *Hessian) alloc() {
	if h.Data == nil {
		h.Data = make([]float64, h.K*h.K)
	}
}

// BatchRows is the number of activation rows an accumulator gathers (as float64) before it adds
// them to its Hessian in one rank-k update: each update reads and writes the whole upper triangle,
// so fewer, larger updates move less memory per flop.
const BatchRows = 512

// rowBatch holds the pending rows of one accumulator at a time, as float64. Accumulators that are
// never filled at once (the same input of the blocks of a window, which run one after another) share
// one: adding to a batch that holds another accumulator's rows first flushes those into their Hessian.
type rowBatch struct {
	limit int       // rows gathered before an update: BatchRows, or fewer when the corpus has fewer
	x     []float64 // limit·K values, outside the Go heap when large (hugebuf)
	pack  []float64 // the pure-Go update's packed rows (gramScratch), in x's buffer after x; else empty
	free  func()    // releases x and pack, or nil
	rows  int
	owner *accumulator
}

// grow gives the batch a buffer for rows of k values: a new one (hugebuf: one fault per 2 MiB of a
// 17408-wide batch's 71 MB instead of one per 4 KiB) when it holds a smaller one, which it frees.
func (b *rowBatch) grow(k int) {
	n, p := b.limit*k, gramScratch(k, b.limit)
	if len(b.x) < n || len(b.pack) < p {
		b.release()
		buf, free := hugebuf.Make[float64](n + p)
		b.x, b.pack, b.free = buf[:n:n], buf[n:], free
	}
}

// release frees the batch's buffer (nothing when a pending update took it).
func (b *rowBatch) release() {
	if b.free != nil {
		b.free()
	}
	b.x, b.pack, b.free = nil, nil, nil
}

// gramScratch is the number of values the update of a batch of rows of k values packs them into:
// dgemm.GramScratch in the pure-Go build (GramUpper), none with OpenBLAS.
func gramScratch(k, rows int) int {
	if pureGoBLAS() {
		return dgemm.GramScratch(k, rows)
	}
	return 0
}

// batchRows is the row limit of the batches of a corpus of nSeq sequences of seqLen tokens.
func batchRows(nSeq, seqLen int) int { return max(1, min(BatchRows, nSeq*seqLen)) }

// accumulator adds rows into the upper triangle (and the diagonal) of a Hessian through a rowBatch;
// flush completes the pending update, Symmetrize the lower triangle.
type accumulator struct {
	h      *Hessian
	batch  *rowBatch
	expert bool    // an expert's Hessian (flush does not prefault it)
	res    *Result // CaptureDeferred's: it allocates Data (allocData), outside the Go heap
}

// allocData gives a's Hessian its zeroed K × K Data if it has none yet: on the Go heap, or for a
// CaptureDeferred (whose Hessians only its encoders read) in a sparse mapping its Result frees.
func (a *accumulator) allocData() {
	if a.res == nil || a.h.Data != nil {
		a.h.alloc()
		return
	}
	a.res.allocData(a.h)
}

func newAccumulator(h *Hessian, b *rowBatch) *accumulator {
	if b == nil {
		b = &rowBatch{limit: BatchRows}
	}
	return &accumulator{h: h, batch: b}
}

// add gathers the len(x)/K rows of x, flushing a full batch before it takes more rows. The Hessian is
// complete only after flush.
func (a *accumulator) add(x []float32) error {
	k := a.h.K
	if len(x)%k != 0 {
		return fmt.Errorf("hessian K=%d: %d values are not whole rows: %w", k, len(x), ErrShape)
	}
	b := a.batch
	if b.owner != a {
		if b.owner != nil {
			b.owner.flush()
		}
		b.owner = a
		b.grow(k)
	}
	for len(x) > 0 {
		if b.rows == b.limit { // a full batch is added when more rows come (or by flush)
			a.flush()
			b.owner = a
		}
		n := min(len(x)/k, b.limit-b.rows)
		dst := b.x[b.rows*k : (b.rows+n)*k]
		for i, v := range x[:n*k] {
			dst[i] = float64(v)
		}
		b.rows += n
		x = x[n*k:]
	}
	return nil
}

// flush adds the pending rows to the Hessian: H[i][j] += Σ_t x[t][i]·x[t][j] for j >= i, in float64.
func (a *accumulator) flush() {
	b := a.batch
	if b.owner != a {
		return
	}
	if b.rows > 0 {
		a.allocData()
		if a.h.Tokens == 0 && !a.expert {
			// The first update of a fresh Hessian would fault its upper triangle in one page at a time
			// inside BLAS; populate those pages first (not an expert's: most experts see few tokens).
			prefaultUpper(a.h)
		}
		syrkUpper(a.h.Data, a.h.K, b.x[:b.rows*a.h.K], b.rows, b.pack)
		a.h.Tokens += int64(b.rows)
	}
	b.rows, b.owner = 0, nil
}

// pureGoBLAS reports whether blas64 runs the pure-Go build's kernels (the build without -tags blas:
// gonum's BLAS with ork/internal/dgemm's products). syrkUpper then runs dgemm.GramUpper: the sums of
// gonum's Dgemm and Dsyrk, as the stripes of Dgemm it ran before gave them.
func pureGoBLAS() bool { return quant.BLASBackend == "gonum" }

// blasTile is the side of the tiles of the upper triangle the OpenBLAS update works on: one dsyrk per
// diagonal tile, one dgemm per tile right of it. One dsyrk of a 17408-wide triangle (the 27B ffn_down
// input) ran at 0.79x the time of these tiles' calls (docs/performance-log.md, "Calibration: profile and fix").
const blasTile = 4096

// serialTile is the side of the tiles syrkUpper hands to its workers, each one call on one OpenBLAS
// thread: small enough that a 5120-wide triangle's 15 tiles keep two workers busy to the end.
const serialTile = 1024

// AddGram adds xᵀx (x: t rows of k) to the upper triangle of the k × k row-major c as a Hessian's
// update does in this build (syrkUpper: OpenBLAS's tiles, or the pure-Go build's GramUpper): what the
// benchmark harness times as the Hessians' float64 rate.
func AddGram(c []float64, k int, x []float64, t int) { syrkUpper(c, k, x, t, nil) }

// syrkUpper adds xᵀx (x: t rows of k) to the upper triangle of the k × k row-major c. With OpenBLAS,
// tiles of the triangle: a dsyrk for each diagonal tile, a dgemm for each tile right of it — tiles of
// blasTile one after another on OpenBLAS's threads, or, while OpenBLAS runs each call on one thread
// (quant.BLASSingleThreaded: the calibrate node's scope), tiles of serialTile taken by GOMAXPROCS
// workers, largest first. Every value's sum runs in the same order either way. In the pure-Go build,
// dgemm.GramUpper (gonum's sums on dgemm's kernels, x packed once a pass into pack, which may be
// short or nil: GramUpper then takes a pooled buffer); the strict lower triangle is not written.
func syrkUpper(c []float64, k int, x []float64, t int, pack []float64) {
	if pureGoBLAS() {
		dgemm.GramUpper(k, t, x, k, c, k, pack)
		return
	}
	side, workers := blasTile, 1
	if quant.BLASSingleThreaded() {
		side, workers = serialTile, runtime.GOMAXPROCS(0)
	}
	tiles := upperTiles(k, side)
	parallel.For(len(tiles), workers, func(i int) {
		tl := tiles[i]
		xr := blas64.General{Rows: t, Cols: tl.r1 - tl.r0, Stride: k, Data: x[tl.r0:]}
		if tl.c0 == tl.r0 {
			blas64.Syrk(blas.Trans, 1, xr, 1, blas64.Symmetric{Uplo: blas.Upper, N: tl.r1 - tl.r0, Stride: k, Data: c[tl.r0*k+tl.r0:]})
			return
		}
		xc := blas64.General{Rows: t, Cols: tl.c1 - tl.c0, Stride: k, Data: x[tl.c0:]}
		cv := blas64.General{Rows: tl.r1 - tl.r0, Cols: tl.c1 - tl.c0, Stride: k, Data: c[tl.r0*k+tl.c0:]}
		blas64.Gemm(blas.Trans, blas.NoTrans, 1, xr, xc, 1, cv)
	})
}

// triTile is the block rows [r0, r1) × columns [c0, c1) of an upper triangle; c0 = r0 on the diagonal.
type triTile struct{ r0, r1, c0, c1 int }

// upperTiles cuts the upper triangle of a k × k matrix into tiles of side rows and columns (the last
// ones narrower), ordered by their multiply-adds, largest first (a diagonal tile counts half).
func upperTiles(k, side int) []triTile {
	var tiles []triTile
	for r0 := 0; r0 < k; r0 += side {
		for c0 := r0; c0 < k; c0 += side {
			tiles = append(tiles, triTile{r0, min(r0+side, k), c0, min(c0+side, k)})
		}
	}
	cost := func(t triTile) int {
		if t.c0 == t.r0 {
			return (t.r1 - t.r0) * (t.r1 - t.r0 + 1) / 2
		}
		return (t.r1 - t.r0) * (t.c1 - t.c0)
	}
	sort.SliceStable(tiles, func(a, b int) bool { return cost(tiles[a]) > cost(tiles[b]) })
	return tiles
}

// tile is the side of the square blocks the checks walk, so that both the row-major reads and the
// column-strided ones stay in cache.
const tile = 64

// symmetrizeTile is the side of Symmetrize's blocks. It writes the column-strided values, whose rows
// are K values apart (a multiple of 4 KiB at 27B widths): 64 of them share one L1 set, and in tiles
// of 64 every write missed. A 17408-wide matrix on two Zen 5 cores: 0.61-0.64 s in tiles of 64,
// 0.26-0.32 s in tiles of 16. (The checks, which only read, are faster in tiles of 64: 0.38 s against
// 0.91-0.96 s.)
const symmetrizeTile = 16

// forTiles calls f(i0, i1, j0, j1) for every side x side tile of the upper triangle (j0 >= i0; the
// diagonal tiles whole), the row bands of tiles spread over GOMAXPROCS goroutines. It returns the
// error of the lowest band that failed.
func forTiles(k, side int, f func(i0, i1, j0, j1 int) error) error {
	bands := (k + side - 1) / side
	errs := make([]error, bands)
	parallel.For(bands, runtime.GOMAXPROCS(0), func(b int) {
		i0, i1 := b*side, min(k, b*side+side)
		for j0 := i0; j0 < k; j0 += side {
			if errs[b] = f(i0, i1, j0, min(k, j0+side)); errs[b] != nil {
				return
			}
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Symmetrize copies the upper triangle into the lower one.
func (h *Hessian) Symmetrize() {
	k, d := h.K, h.Data
	forTiles(k, symmetrizeTile, func(i0, i1, j0, j1 int) error {
		for i := i0; i < i1; i++ {
			for j := max(j0, i+1); j < j1; j++ {
				d[j*k+i] = d[i*k+j]
			}
		}
		return nil
	})
}

// Add accumulates the rows of x (T rows of K values) into h and keeps it symmetric. Capture uses the
// batched upper-triangle path and symmetrizes once at the end.
func (h *Hessian) Add(x []float32) error {
	a := newAccumulator(h, nil)
	if err := a.add(x); err != nil {
		return err
	}
	a.flush()
	h.Symmetrize()
	return nil
}

// CheckUpper verifies the size and that every value of the upper triangle is finite, with a
// non-negative diagonal (a necessary condition for positive semi-definiteness). The lower triangle is
// not read.
func (h *Hessian) CheckUpper() error { return h.check(false) }

// Check is CheckUpper, and verifies that the matrix is exactly symmetric.
func (h *Hessian) Check() error { return h.check(true) }

func (h *Hessian) check(symmetric bool) error {
	if h.K <= 0 || len(h.Data) != h.K*h.K {
		return fmt.Errorf("hessian K=%d with %d values (want K²): %w", h.K, len(h.Data), ErrShape)
	}
	if h.Tokens < 0 {
		return fmt.Errorf("hessian tokens %d: %w", h.Tokens, ErrShape)
	}
	k, d := h.K, h.Data
	return forTiles(k, tile, func(i0, i1, j0, j1 int) error {
		for i := i0; i < i1; i++ {
			for j := max(j0, i); j < j1; j++ {
				a := d[i*k+j]
				if math.IsNaN(a) || math.IsInf(a, 0) || i == j && a < 0 {
					return fmt.Errorf("hessian at (%d,%d) = %v: %w", i, j, a, ErrNotFinite)
				}
				if symmetric && i != j && d[j*k+i] != a {
					return fmt.Errorf("hessian at (%d,%d) = %v, (%d,%d) = %v: %w", i, j, a, j, i, d[j*k+i], ErrNotFinite)
				}
			}
		}
		return nil
	})
}

// Diag returns the diagonal of h (the sums of squared activations per input channel).
func (h *Hessian) Diag() []float64 {
	d := make([]float64, h.K)
	for i := range d {
		d[i] = h.Data[i*h.K+i]
	}
	return d
}
