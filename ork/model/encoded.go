package model

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"

	"gonum.org/v1/gonum/blas/blas32"

	"orkpipe/ork/gguf"
	"orkpipe/ork/internal/parallel"
	"orkpipe/ork/internal/sgemm"
	"orkpipe/ork/quant"
)

// Encoded is a Linear whose weight stays in its GGUF source encoding: N rows of K values, each row
// Type.RowBytes(K) bytes of Raw, exactly as the tensor's data section holds them. Apply dequantizes
// blocks of rows (with gguf.Dequantize, the decoder every reader uses) into a bounded float32 scratch and
// multiplies each block into its columns of y, so the weight costs its encoded size (Q8_0: 1.0625 bytes a
// value, F16/BF16: 2) instead of 4 bytes a value as a [Dense].
//
// Results are bit-identical to a Dense of the dequantized weight in the pure-Go build (an invariant the
// tests check): a row dequantizes to the same float32 values, and each block's product is arranged so
// that gonum's Sgemm sums every output in the same order as it does for the whole matrix (applyWorkers);
// on AVX2 a weight of one block is one sgemm.NTRows, which decodes panels of rows (Decode) as its
// kernels reach them, a few hundred KiB at a time: no block of float32 rows is written out to memory
// and read back, which for a weight applied to few tokens (an MoE expert) cost more than the product.
// Built with -tags blas, both go to OpenBLAS's sgemm, whose order depends on the shape: they agree to
// float32 rounding, not bit for bit; there Apply pipelines larger blocks instead (applyPipelined), or,
// while OpenBLAS is held to one thread per call, multiplies panels on every core (applyPanels) — there a
// Dense of the same weight cuts the same panels, and the two agree bit for bit whatever the number of
// cores.
//
// Scratch bound: one Apply holds at most [EncodedScratchBytes](N, K) bytes of float32 scratch. A weight
// that fits one block: the whole weight dequantized, or, on AVX2 in the pure-Go build, NTRows' panels
// (one a goroutine, never more than the weight in all). Else two row blocks — in the pure-Go build two
// workers taking blocks in turn, each dequantizing into its own, blocks of at most max(16 MiB, 256
// rows); under OpenBLAS one dequantizing while the other is multiplied, blocks of at most max(16 MiB, 64
// rows); under OpenBLAS held to one thread per call (quant.SingleThreadedBLAS, the calibrate node's
// scope) one panel of at most max(16 MiB, 64 rows) per worker, GOMAXPROCS workers each dequantizing and
// multiplying its own (applyPanels). The buffers come from and return to a shared pool, so a sequence
// of Applies allocates nothing in the steady state.
// Encoded is safe for concurrent Applies.
type Encoded struct {
	N, K int
	Type gguf.Type
	Raw  []byte

	rb int // bytes per row
	// blockBytes overrides encodedBlockBytes (tests: many small blocks).
	blockBytes int
	// mapped: Raw is a mapping of the source file (GGUFSource.MapEncoded), whose faults dequant turns
	// into errors; free unmaps it (else nil).
	mapped bool
	free   func()
}

// release unmaps Raw when it is a mapping of the file (GGUFSource.MapEncoded); the weight must not be
// applied afterwards.
func (e *Encoded) release() {
	if e.free != nil {
		e.free()
	}
}

// Row blocks of an Apply: about encodedBlockBytes of float32 each, in multiples of gonumBlock rows;
// pipelineBlockBytes under OpenBLAS (applyPipelined), panelBytes under a single-threaded OpenBLAS
// (applyPanels). Each block's product streams all of X through the kernels: with 4 MiB blocks a 27B
// ffn_down (K 17408) took 64 rows a block and ran at 0.81x the rate of 192-row blocks (calibration's
// 512 tokens, alternating in one process; the 5120-wide weights level).
const (
	encodedBlockBytes  = 16 << 20
	pipelineBlockBytes = 16 << 20
	panelBytes         = 16 << 20
)

// gonumBlock and gonumMinParBlock are gonum's Sgemm tiling (blas/gonum: blockSize, minParBlock): a product
// of m×n outputs with at least gonumMinParBlock tiles of gonumBlock×gonumBlock runs the parallel path,
// which sums every output over K in slices of gonumBlock; a smaller one sums each output's K values in
// one dot product. Encoded reproduces the path of the whole product for every block (the equality tests
// fail if gonum changes its tiling).
const (
	gonumBlock       = 64
	gonumMinParBlock = 4
)

// EncodedScratchBytes is the most float32 scratch one Apply of an n×k Encoded holds, whatever the
// number of tokens and the build: 4·n·k when the weight is always one block (n at most the rows of a
// 16 MiB block), else two blocks of at most max(16 MiB of rows, 256 rows) in the pure-Go build, two of
// at most max(16 MiB of rows, 64 rows) under OpenBLAS (pipelineRows), and one panel of at most
// max(16 MiB of rows, 64 rows) per worker (GOMAXPROCS, at most one per panel) under a single-threaded
// OpenBLAS (panelRows); the largest of these. On 2 cores the panels hold no more than the two blocks.
// A weight of one block that runs as one sgemm.NTRows (the pure-Go build on AVX2) holds its decoded
// panels instead, never more than the weight and alignment (sgemm.RowsScratchBytes): within the bound.
func EncodedScratchBytes(n, k int) int64 {
	n64, k64 := int64(n), int64(k)
	pipelined := 2 * 4 * k64 * int64(pipelineRows(n, k))
	pr := panelRows(n, k)
	pipelined = max(pipelined, int64(parallel.Workers(ceilDiv(n, pr)))*4*k64*int64(pr))
	if n <= minBlockRows(k) {
		return max(4*n64*k64, pipelined)
	}
	most := max(int64(minBlockRows(k)), gonumBlock*gonumMinParBlock)
	return max(2*4*k64*min(n64, most), pipelined)
}

// pipelineRows is the number of rows of a block of applyPipelined: about pipelineBlockBytes of float32,
// at least gonumBlock rows, at most n (then the whole weight is one block, dequantized once).
func pipelineRows(n, k int) int { return min(n, max(gonumBlock, pipelineBlockBytes/(4*k))) }

// minBlockRows is the fewest rows a block of an Apply has (before the cut to N): a multiple of
// gonumBlock near encodedBlockBytes.
func minBlockRows(k int) int {
	return max(gonumBlock, encodedBlockBytes/(4*k)/gonumBlock*gonumBlock)
}

// KeepsEncoded reports whether a GGUFSource with KeepEncoded returns a matmul weight of type t as an
// Encoded Linear: the types gguf.Dequantize decodes whose values take fewer than 4 bytes. F32 and F64
// weights are float32 Dense weights either way.
func KeepsEncoded(t gguf.Type) bool {
	return gguf.CanDequantize(t) && t != gguf.TypeF32 && t != gguf.TypeF64
}

// NewEncoded checks that raw holds n rows of k values of type t (k a whole number of t's blocks) and
// returns an Encoded over it; raw is not copied.
func NewEncoded(t gguf.Type, n, k int, raw []byte) (*Encoded, error) {
	if !KeepsEncoded(t) {
		return nil, fmt.Errorf("encoded %dx%d: type %s: %w (want a quantized or 16-bit type gguf can dequantize)", n, k, t, ErrUnsupported)
	}
	if n <= 0 || k <= 0 || k%t.BlockSize() != 0 {
		return nil, fmt.Errorf("encoded %dx%d %s: rows of %d values are not whole blocks of %d: %w", n, k, t, k, t.BlockSize(), ErrBadModel)
	}
	rb, err := t.RowBytes(int64(k))
	if err != nil {
		return nil, fmt.Errorf("encoded %dx%d %s: %w", n, k, t, err)
	}
	if int64(len(raw)) != int64(n)*rb {
		return nil, fmt.Errorf("encoded %dx%d %s: %d bytes, want %d rows of %d: %w", n, k, t, len(raw), n, rb, ErrBadModel)
	}
	return &Encoded{N: n, K: k, Type: t, Raw: raw, rb: int(rb)}, nil
}

// Dims implements Linear.
func (e *Encoded) Dims() (int, int) { return e.N, e.K }

// gemmParallel reports whether gonum's Sgemm takes its parallel path for m×n outputs.
func gemmParallel(m, n int) bool {
	return ceilDiv(m, gonumBlock)*ceilDiv(n, gonumBlock) >= gonumMinParBlock
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// blockRows is the number of rows per block for t tokens: a multiple of gonumBlock near the block
// bytes, enough rows that a block of a product on the parallel path is on it too, and the rows spread
// evenly over the blocks, so that the last block is rarely too short for the parallel path.
func (e *Encoded) blockRows(t int) int {
	target := e.blockBytes
	if target == 0 {
		target = encodedBlockBytes
	}
	rows := max(gonumBlock, target/(4*e.K)/gonumBlock*gonumBlock)
	least := 0
	if gemmParallel(t, e.N) {
		least = gonumBlock * ceilDiv(gonumMinParBlock, ceilDiv(t, gonumBlock))
		rows = max(rows, least)
	}
	if rows >= e.N {
		return e.N
	}
	even := ceilDiv(ceilDiv(e.N, ceilDiv(e.N, rows)), gonumBlock) * gonumBlock // <= rows
	return max(even, least)
}

var scratchPool = sync.Pool{New: func() any { return new([]float32) }}

// getScratch returns a pooled buffer of n values (a pooled one too small is dropped).
func getScratch(n int) *[]float32 {
	p := scratchPool.Get().(*[]float32)
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

// Apply implements Linear: y = X·Wᵀ, by blocks of rows of W, each dequantized into scratch and
// multiplied into columns [r0, r1) of y (stride N): under gonum's Sgemm by applyWorkers, under another
// BLAS (OpenBLAS) by applyPipelined.
func (e *Encoded) Apply(y, x []float32) error {
	if err := checkApply(y, x, e.N, e.K); err != nil {
		return err
	}
	t := len(x) / e.K
	if t == 0 {
		return nil
	}
	if !gonumSgemm() {
		if quant.BLASSingleThreaded() {
			return e.applyPanels(y, x, t)
		}
		return e.applyPipelined(y, x, t)
	}
	return e.applyWorkers(y, x, t)
}

// dequant dequantizes rows [r0, r1) of the weight into w. When Raw maps the source file, a fault
// reading it (the file truncated under the mapping, an I/O error) is an error naming the rows, not a
// crash.
func (e *Encoded) dequant(r0, r1 int, w []float32) error {
	return e.Decode(w[:(r1-r0)*e.K], r0, r1, 0, e.K)
}

// Decode writes values [k0, k1) of rows [r0, r1) of the weight to dst, k1-k0 values a row (sgemm.Rows):
// k0 and k1 whole blocks of the type (or k1 = K). When Raw maps the source file, a fault reading it is
// an error naming the rows, as in dequant.
func (e *Encoded) Decode(dst []float32, r0, r1, k0, k1 int) (err error) {
	bs := e.Type.BlockSize()
	if r0 < 0 || r1 > e.N || r0 > r1 || k0 < 0 || k1 > e.K || k0 > k1 || k0%bs != 0 || k1%bs != 0 ||
		len(dst) != (r1-r0)*(k1-k0) {
		return fmt.Errorf("encoded %dx%d %s: decoding rows [%d, %d), values [%d, %d) into %d values: "+
			"want whole blocks of %d within the weight: %w", e.N, e.K, e.Type, r0, r1, k0, k1, len(dst), bs, ErrBadModel)
	}
	if e.mapped {
		defer runtime.KeepAlive(e) // the mapping is unmapped when e is collected: not while Raw is read
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if r := recover(); r != nil {
				f, fault := r.(interface{ Addr() uintptr })
				if !fault {
					panic(r) // not a fault on the weight's bytes: a bug
				}
				err = fmt.Errorf("encoded %dx%d %s: rows [%d, %d): fault reading the weight's bytes at address %#x: %v: %w", e.N, e.K, e.Type, r0, r1, f.Addr(), r, ErrBadModel)
			}
		}()
	}
	if k0 == 0 && k1 == e.K { // whole rows: one call
		if err := gguf.Dequantize(e.Type, e.Raw[r0*e.rb:r1*e.rb], dst); err != nil {
			return fmt.Errorf("encoded %dx%d %s: rows [%d, %d): %w", e.N, e.K, e.Type, r0, r1, err)
		}
		return nil
	}
	bb := e.rb / (e.K / bs) // bytes a block
	w := k1 - k0
	for r := r0; r < r1; r++ {
		src := e.Raw[r*e.rb+k0/bs*bb : r*e.rb+k1/bs*bb]
		if err := gguf.Dequantize(e.Type, src, dst[(r-r0)*w:(r-r0+1)*w]); err != nil {
			return fmt.Errorf("encoded %dx%d %s: row %d, values [%d, %d): %w", e.N, e.K, e.Type, r, k0, k1, err)
		}
	}
	return nil
}

// applyWorkers is Apply by two workers taking blocks of blockRows in turn. Each block's product is
// arranged so that gonum's Sgemm sums every output in the same order as for the whole matrix: when the
// whole product would take Sgemm's parallel path and a block would not (the last, short block), the
// block's product is summed over K in gonum's slices of 64, each slice one Sgemm call, which is the
// parallel path's order.
func (e *Encoded) applyWorkers(y, x []float32, t int) error {
	n, k := e.N, e.K
	rows := e.blockRows(t)
	if rows == n && decodeRows && sgemm.DecodesRows(k) {
		// A weight of one block would be dequantized whole on one goroutine before its product
		// starts, and its float32 rows written out and read back: instead one product, each panel
		// of rows decoded on the core whose kernels reach it. (Weights of several blocks keep them:
		// there one worker dequantizes while the other multiplies.)
		return sgemm.NTRows(t, n, k, x, k, e, 0, y, n)
	}
	par := gemmParallel(t, n)
	gemm := func(r0, r1 int, w []float32) {
		r := r1 - r0
		ym := blas32.General{Rows: t, Cols: r, Stride: n, Data: y[r0:]}
		if !par || gemmParallel(t, r) {
			xm := blas32.General{Rows: t, Cols: k, Stride: k, Data: x}
			wm := blas32.General{Rows: r, Cols: k, Stride: k, Data: w}
			gemmNT(xm, wm, 0, ym)
			return
		}
		for k0 := 0; k0 < k; k0 += gonumBlock {
			kk := min(gonumBlock, k-k0)
			xm := blas32.General{Rows: t, Cols: kk, Stride: k, Data: x[k0:]}
			wm := blas32.General{Rows: r, Cols: kk, Stride: k, Data: w[k0:]}
			beta := float32(1)
			if k0 == 0 {
				beta = 0
			}
			gemmNT(xm, wm, beta, ym)
		}
	}
	a := getScratch(rows * k)
	defer scratchPool.Put(a)
	if rows == n {
		if err := e.dequant(0, n, *a); err != nil {
			return err
		}
		gemm(0, n, *a)
		return nil
	}
	b := getScratch(rows * k)
	defer scratchPool.Put(b)
	// Two workers, each with its own block buffer, take the blocks in turn: one dequantizes while the
	// other multiplies, and neither waits for the other's product to finish.
	bufs := [2][]float32{*a, *b}
	return parallel.ForErr(ceilDiv(n, rows), 2, func(w, blk int) error {
		r0, r1 := blk*rows, min(blk*rows+rows, n)
		if err := e.dequant(r0, r1, bufs[w]); err != nil {
			return err
		}
		gemm(r0, r1, bufs[w])
		return nil
	})
}

// decodeRows lets applyWorkers run sgemm.NTRows where it can (tests turn it off to run the row blocks).
var decodeRows = true

// gonumSgemm reports whether blas32 runs gonum's own kernels (the pure-Go build), whose summation order
// Apply reproduces; under -tags blas it is OpenBLAS (ork/quant registers it).
func gonumSgemm() bool { return sgemm.GonumRegistered() }

// applyPipelined is Apply with a BLAS that is not gonum's (OpenBLAS, which runs each product on every
// core itself): one goroutine dequantizes the next row block while the caller multiplies the current
// one, so the products run one at a time, each on a block of pipelineRows (4 times the rows of
// applyWorkers' blocks: OpenBLAS's sgemm runs thin blocks of a wide weight at a lower rate).
func (e *Encoded) applyPipelined(y, x []float32, t int) error {
	n, k := e.N, e.K
	rows := pipelineRows(n, k)
	gemm := func(r0, r1 int, w []float32) {
		ym := blas32.General{Rows: t, Cols: r1 - r0, Stride: n, Data: y[r0:]}
		xm := blas32.General{Rows: t, Cols: k, Stride: k, Data: x}
		wm := blas32.General{Rows: r1 - r0, Cols: k, Stride: k, Data: w}
		gemmNT(xm, wm, 0, ym)
	}
	if rows == n {
		a := getScratch(n * k)
		defer scratchPool.Put(a)
		if err := e.dequant(0, n, *a); err != nil {
			return err
		}
		gemm(0, n, *a)
		return nil
	}
	bufs := [2]*[]float32{getScratch(rows * k), getScratch(rows * k)}
	defer scratchPool.Put(bufs[0])
	defer scratchPool.Put(bufs[1])
	type block struct {
		r0, r1, buf int
		w           []float32
		err         error
	}
	ready := make(chan block, 1)
	free := make(chan int, 2)
	free <- 0
	free <- 1
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(ready)
		for r0 := 0; r0 < n; r0 += rows {
			var i int
			select {
			case i = <-free:
			case <-done:
				return
			}
			r1 := min(r0+rows, n)
			w := (*bufs[i])[:(r1-r0)*k]
			err := e.dequant(r0, r1, w)
			select {
			case ready <- block{r0, r1, i, w, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for b := range ready {
		if b.err != nil {
			return b.err
		}
		gemm(b.r0, b.r1, b.w)
		free <- b.buf
	}
	return nil
}

// applyPanels is Apply while OpenBLAS runs each call on one thread (quant.BLASSingleThreaded: the
// calibrate node's scope): GOMAXPROCS workers take the panels of panelRows rows in turn, each
// dequantizing a panel into its own scratch and multiplying it on its own thread, so the dequantization
// runs on every core and no BLAS thread waits between calls. The panels depend on the weight's shape
// only, not on the number of workers, so neither do the results.
func (e *Encoded) applyPanels(y, x []float32, t int) error {
	n, k := e.N, e.K
	rows := panelRows(n, k)
	panels := ceilDiv(n, rows)
	bufs := make([]*[]float32, parallel.Workers(panels)) // a worker's scratch, from its first panel
	defer func() {
		for _, b := range bufs {
			if b != nil {
				scratchPool.Put(b)
			}
		}
	}()
	return parallel.ForErr(panels, len(bufs), func(wk, p int) error {
		if bufs[wk] == nil {
			bufs[wk] = getScratch(rows * k)
		}
		r0, r1 := p*rows, min(p*rows+rows, n)
		w := (*bufs[wk])[:(r1-r0)*k]
		if err := e.dequant(r0, r1, w); err != nil {
			return err
		}
		ym := blas32.General{Rows: t, Cols: r1 - r0, Stride: n, Data: y[r0:]}
		xm := blas32.General{Rows: t, Cols: k, Stride: k, Data: x}
		wm := blas32.General{Rows: r1 - r0, Cols: k, Stride: k, Data: w}
		gemmNT(xm, wm, 0, ym)
		return nil
	})
}

// panelRows is the number of rows of a panel of applyPanels (and of Dense's Apply in the same scope):
// about panelBytes of float32, at least gonumBlock rows, at most n.
func panelRows(n, k int) int { return min(n, max(gonumBlock, panelBytes/(4*k))) }
