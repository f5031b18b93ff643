package quant

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"orkpipe/ork/internal/checked"
	"orkpipe/ork/internal/parallel"
)

// Rotation is the orthogonal transform R = B·D along K described in the package doc. The zero
// value means "not rotated". Build one with NewRotation; it is a small value type that the pack
// records per entry (K, Padded, Block, Signs, Seed fully determine it).
type Rotation struct {
	K      int    // logical row length
	Padded int    // length after zero-padding: a multiple of Block, >= K
	Block  int    // Walsh-Hadamard block size: a power of two >= 32
	Signs  bool   // random ±1 signs D drawn from Seed (false: D = I)
	Seed   uint64 // seed of the signs (splitmix64 stream; bit 63 of each draw is the sign)
}

// MinBlock is the smallest Hadamard block NewRotation uses, and the padding unit for K without
// a power-of-two divisor of at least MinBlock.
const MinBlock = 32

// IsZero reports whether r is the zero value (no rotation).
func (r Rotation) IsZero() bool { return r.K == 0 }

// NewRotation returns the rotation for rows of k values: blocks of the largest power of two
// dividing k, if that is at least 32; otherwise k is zero-padded to the next multiple of 32 and
// the blocks are the largest power of two dividing the padded length.
func NewRotation(k int, signs bool, seed uint64) (Rotation, error) {
	return NewRotationMinBlock(k, signs, seed, MinBlock)
}

// NewRotationMinBlock is NewRotation with blocks of at least minBlock values (a power of two >= 32):
// when the largest power of two dividing k (or k padded to a multiple of 32) is smaller, k is
// zero-padded to the next multiple of minBlock instead (172 with minBlock 256: one block of 256,
// where NewRotation makes three of 64). A larger block mixes more channels into each rotated value,
// so activation outliers spread over more of them, at the cost of the padding.
func NewRotationMinBlock(k int, signs bool, seed uint64, minBlock int) (Rotation, error) {
	if k <= 0 {
		return Rotation{}, fmt.Errorf("rotation for K=%d: %w (want K > 0)", k, ErrShape)
	}
	if minBlock < MinBlock || minBlock&(minBlock-1) != 0 {
		return Rotation{}, fmt.Errorf("rotation minimum block %d: %w (want a power of two >= %d)", minBlock, ErrParam, MinBlock)
	}
	p := k
	if k&-k < MinBlock {
		p = (k + MinBlock - 1) / MinBlock * MinBlock
	}
	if p&-p < minBlock {
		p = (k + minBlock - 1) / minBlock * minBlock
	}
	r := Rotation{K: k, Padded: p, Block: p & -p, Signs: signs}
	if signs {
		r.Seed = seed
	}
	return r, nil
}

// Validate checks the invariants of a non-zero rotation.
func (r Rotation) Validate() error {
	if r.IsZero() {
		return nil
	}
	if r.Block < MinBlock || r.Block&(r.Block-1) != 0 || r.Padded < r.K || r.Padded%r.Block != 0 || r.Padded-r.K >= max(MinBlock, r.Block) {
		return fmt.Errorf("rotation K=%d padded=%d block=%d: %w (want a power-of-two block >= %d dividing padded, padded-K below the block and below %d or the block)",
			r.K, r.Padded, r.Block, ErrParam, MinBlock, MinBlock)
	}
	return nil
}

// signVector returns D's diagonal (nil when Signs is false).
func (r Rotation) signVector() []float64 {
	if !r.Signs {
		return nil
	}
	g := newRNG(r.Seed)
	d := make([]float64, r.Padded)
	for i := range d {
		if g.next()>>63 == 1 {
			d[i] = -1
		} else {
			d[i] = 1
		}
	}
	return d
}

// Apply rotates each of the rows rows of src (k values each, k = r.K) into dst (r.Padded values
// each): zero-pad, multiply by the signs, then the normalised block Walsh-Hadamard transform.
// The arithmetic is float64; dst and src must not overlap. It runs one block at a time in a pooled
// scratch (ScratchBytes): a call allocates nothing once the pool holds one large enough.
func (r Rotation) Apply(dst, src []float32, rows int) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.IsZero() || len(src) != rows*r.K || len(dst) != rows*r.Padded {
		return fmt.Errorf("rotate %d rows: src %d dst %d values, want %d and %d: %w", rows, len(src), len(dst), rows*r.K, rows*r.Padded, ErrShape)
	}
	s := r.getScratch()
	defer putScratch(s)
	b := r.Block
	x := s.x[:b:b]
	for i := 0; i < rows; i++ {
		row, o := src[i*r.K:(i+1)*r.K], dst[i*r.Padded:(i+1)*r.Padded]
		for b0 := 0; b0 < r.Padded; b0 += b {
			n := copyWidened(x, row[min(b0, r.K):min(b0+b, r.K)])
			clear(x[n:]) // the padding
			s.applySigns(x, b0)
			fwhtBlocks(x, b)
			for j, v := range x {
				o[b0+j] = float32(v)
			}
		}
	}
	return nil
}

// ApplyRows is Apply on up to workers goroutines, each rotating a contiguous share of at least 64
// of the rows (rows are independent: the same values as Apply), each with its own scratch.
func (r Rotation) ApplyRows(dst, src []float32, rows, workers int) error {
	workers = ApplyRowsWorkers(rows, workers)
	if workers == 1 || r.IsZero() || len(src) != rows*r.K || len(dst) != rows*r.Padded {
		return r.Apply(dst, src, rows) // one call, or Apply's error for the whole
	}
	step := (rows + workers - 1) / workers
	errs := make([]error, workers)
	parallel.Split(rows, step, func(lo, hi int) {
		errs[lo/step] = r.Apply(dst[lo*r.Padded:hi*r.Padded], src[lo*r.K:hi*r.K], hi-lo)
	})
	return errors.Join(errs...)
}

// ApplyRowsWorkers is the number of goroutines ApplyRows(dst, src, rows, workers) runs Apply on:
// workers (at least 1), at most one a share of 64 rows.
func ApplyRowsWorkers(rows, workers int) int {
	return min(max(workers, 1), rows/64+1)
}

// ScratchBytes is the scratch one Apply or Inverse of r holds while it runs, on each goroutine running
// one (ApplyRows: ApplyRowsWorkers of them): a block of float64 values and the signs as bits,
// 8·Block + 8·⌈Padded/64⌉ bytes; ok is false when that overflows int64 (a rotation no pack holds). It
// is pooled, so it is held between calls too, until a garbage collection empties the pool.
func (r Rotation) ScratchBytes() (n int64, ok bool) {
	block, ok := checked.Mul(int64(r.Block), 8)
	if !ok {
		return 0, false
	}
	return checked.Add(block, 8*((int64(r.Padded)+63)/64))
}

// Inverse maps rotated rows (r.Padded values) back to the original space (r.K values, the
// padding dropped): D·Bᵀ, as B is symmetric and orthogonal. Like Apply it runs one block at a time
// in a pooled scratch.
func (r Rotation) Inverse(dst, src []float32, rows int) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.IsZero() || len(src) != rows*r.Padded || len(dst) != rows*r.K {
		return fmt.Errorf("unrotate %d rows: src %d dst %d values, want %d and %d: %w", rows, len(src), len(dst), rows*r.Padded, rows*r.K, ErrShape)
	}
	s := r.getScratch()
	defer putScratch(s)
	b := r.Block
	x := s.x[:b:b]
	for i := 0; i < rows; i++ {
		row, o := src[i*r.Padded:(i+1)*r.Padded], dst[i*r.K:(i+1)*r.K]
		for b0 := 0; b0 < r.K; b0 += b { // a block wholly of padding gives no value
			copyWidened(x, row[b0:b0+b])
			fwhtBlocks(x, b)
			s.applySigns(x, b0)
			for j, v := range x[:min(b, r.K-b0)] {
				o[b0+j] = float32(v)
			}
		}
	}
	return nil
}

// copyWidened sets x[j] = float64(src[j]) and returns len(src) (at most len(x)).
func copyWidened(x []float64, src []float32) int {
	x = x[:len(src)]
	for j, v := range src {
		x[j] = float64(v)
	}
	return len(src)
}

// rotScratch is what one Apply or Inverse holds: a block of values and, for a rotation with signs, the
// first n signs of seed's stream as bits (bit i set: sign i is -1). A scratch taken from the pool
// keeps the signs it held, so a rotation applied again (every batch of an emulated weight) does not
// draw them again.
type rotScratch struct {
	x       []float64
	signs   []uint64
	seed    uint64
	n       int  // signs held: the first n of seed's stream
	hasSign bool // the rotation being applied has signs
}

var rotScratchPool = sync.Pool{New: func() any { return new(rotScratch) }}

// maxPooledScratch is the largest scratch (ScratchBytes) returned to the pool: a real rotation's
// block is at most 65536 values (512 KiB) and its signs a few KiB; a larger scratch, for a block a pack
// may declare up to 2^24, is allocated for its call and not kept.
const maxPooledScratch = 1 << 20

// getScratch returns a pooled scratch sized for r, its signs drawn.
func (r Rotation) getScratch() *rotScratch {
	s := rotScratchPool.Get().(*rotScratch)
	if cap(s.x) < r.Block {
		s.x = make([]float64, r.Block)
	}
	s.hasSign = r.Signs
	if r.Signs && (s.n != r.Padded || s.seed != r.Seed) {
		words := (r.Padded + 63) / 64
		if cap(s.signs) < words {
			s.signs = make([]uint64, words)
		}
		s.signs = s.signs[:words]
		clear(s.signs)
		g := newRNG(r.Seed)
		for i := 0; i < r.Padded; i++ { // signVector's draws: bit 63 of each
			s.signs[i>>6] |= g.next() >> 63 << (i & 63)
		}
		s.seed, s.n = r.Seed, r.Padded
	}
	return s
}

// putScratch returns s to the pool, unless it is larger than maxPooledScratch.
func putScratch(s *rotScratch) {
	if 8*int64(cap(s.x))+8*int64(cap(s.signs)) <= maxPooledScratch {
		rotScratchPool.Put(s)
	}
}

// signOf maps a sign bit to the factor signVector holds for it.
var signOf = [2]float64{1, -1}

// applySigns multiplies x, the values at offset off of a padded row, by their signs (nothing without
// signs): the same products as rotate64's and Inverse's by signVector's values.
func (s *rotScratch) applySigns(x []float64, off int) {
	if !s.hasSign {
		return
	}
	for j := range x {
		i := off + j
		x[j] *= signOf[s.signs[i>>6]>>(i&63)&1]
	}
}

// rotate64 rotates one padded float64 row in place (d: signs or nil).
func (r Rotation) rotate64(x, d []float64) {
	if d != nil {
		for j := range x {
			x[j] *= d[j]
		}
	}
	fwhtBlocks(x, r.Block)
}

// fwhtBlocks applies the normalised fast Walsh-Hadamard transform to each consecutive block of
// b values of x (b a power of two). The normalised transform is symmetric and its own inverse.
//
// The butterflies of stages h and 2h run in one pass (radix 4), and the normalisation joins the
// last pass; every value still sees the radix-2 transform's additions, on the same operands in the
// same order, and then the one multiplication, so the results are the radix-2 loop's bit for bit
// (TestFWHTBlocksRadix2).
func fwhtBlocks(x []float64, b int) {
	norm := 1 / math.Sqrt(float64(b))
	for off := 0; off < len(x); off += b {
		v := x[off : off+b : off+b]
		h := 1
		for ; 4*h <= b; h <<= 2 {
			scale := 4*h == b
			for i := 0; i < b; i += 4 * h {
				p0, p1, p2, p3 := v[i:i+h], v[i+h:i+2*h], v[i+2*h:i+3*h], v[i+3*h:i+4*h]
				for j := range p0 {
					x0, x1, x2, x3 := p0[j], p1[j], p2[j], p3[j]
					s01, d01, s23, d23 := x0+x1, x0-x1, x2+x3, x2-x3
					y0, y1, y2, y3 := s01+s23, d01+d23, s01-s23, d01-d23
					if scale {
						y0, y1, y2, y3 = y0*norm, y1*norm, y2*norm, y3*norm
					}
					p0[j], p1[j], p2[j], p3[j] = y0, y1, y2, y3
				}
			}
		}
		switch {
		case h < b: // one radix-2 stage left (b an odd power of two), normalising
			a, c := v[:h], v[h:]
			for j := range a {
				x0, x1 := a[j], c[j]
				a[j], c[j] = (x0+x1)*norm, (x0-x1)*norm
			}
		case b == 1:
			v[0] *= norm
		}
	}
}

// hessianDiag returns the diagonal of R·H·Rᵀ for a K x K Hessian h (float64, row-major), r.Padded
// values, bit for bit the diagonal rotateHessian computes. R is block diagonal, so a block's
// rotated diagonal needs only that diagonal block of H: each block's rows are rotated as
// rotateHessian rotates them (the block's part of R·h_i), then each of its columns, keeping the
// one value on the diagonal. That costs 2·Padded·Block·log2(Block) flops and one Block x Block
// buffer, where rotating the whole H costs 2·Padded²·log2(Block) and Padded x Padded.
func (r Rotation) hessianDiag(h []float64) []float64 {
	k, p, b := r.K, r.Padded, r.Block
	d := r.signVector()
	out := make([]float64, p)
	m := make([]float64, b*b) // m[i][j] = (R·h_(b0+i))_(b0+j): the block's rows rotated
	for b0 := 0; b0 < p; b0 += b {
		var db []float64
		if d != nil {
			db = d[b0 : b0+b]
		}
		for i := 0; i < b; i++ {
			row := m[i*b : (i+1)*b]
			clear(row) // padded rows stay zero, as rotateHessian leaves them; padded columns too
			gi := b0 + i
			if gi >= k {
				continue
			}
			if b0 < k {
				copy(row, h[gi*k+b0:gi*k+min(b0+b, k)])
			}
			rotateBlock(row, db, b)
		}
		rotateColumns(m, db, b)
		norm := 1 / math.Sqrt(float64(b))
		for c := 0; c < b; c++ {
			out[b0+c] = m[c*b+c] * norm
		}
	}
	return out
}

// rotateColumns applies rotateBlock to every column of the b x b row-major matrix m except for
// the final normalisation, which the caller applies to the values it keeps: the signs d scale row
// i, then the butterflies of stages h and 2h combine four rows value by value, a chunk of
// columns at a time (a chunk's rows stay in cache). Per value these are fwhtBlocks' additions on
// the same operands in the same order.
func rotateColumns(m, d []float64, b int) {
	const chunk = 32
	for c0 := 0; c0 < b; c0 += chunk {
		c1 := min(c0+chunk, b)
		row := func(i int) []float64 { return m[i*b+c0 : i*b+c1] }
		if d != nil {
			for i := 0; i < b; i++ {
				x := row(i)
				for j := range x {
					x[j] *= d[i]
				}
			}
		}
		h := 1
		for ; 4*h <= b; h <<= 2 {
			for i := 0; i < b; i += 4 * h {
				for r := i; r < i+h; r++ {
					p0, p1, p2, p3 := row(r), row(r+h), row(r+2*h), row(r+3*h)
					p1, p2, p3 = p1[:len(p0)], p2[:len(p0)], p3[:len(p0)]
					for j := range p0 {
						x0, x1, x2, x3 := p0[j], p1[j], p2[j], p3[j]
						s01, d01, s23, d23 := x0+x1, x0-x1, x2+x3, x2-x3
						p0[j], p1[j], p2[j], p3[j] = s01+s23, d01+d23, s01-s23, d01-d23
					}
				}
			}
		}
		if h < b { // one radix-2 stage left
			for r := 0; r < h; r++ {
				x, y := row(r), row(r+h)
				y = y[:len(x)]
				for j := range x {
					x[j], y[j] = x[j]+y[j], x[j]-y[j]
				}
			}
		}
	}
}

// rotateBlock is rotate64 on one block of b values x with its signs d (nil: none): the same
// arithmetic, value for value, as rotating the whole row the block belongs to.
func rotateBlock(x, d []float64, b int) {
	if d != nil {
		for j := range x {
			x[j] *= d[j]
		}
	}
	fwhtBlocks(x, b)
}

// rotateHessian returns R·H·Rᵀ for a K x K Hessian (float64, row-major): the Hessian of the
// rotated activations, padded to r.Padded (the padded rows and columns start as zero), computed on
// up to workers goroutines.
func (r Rotation) rotateHessian(h []float64, workers int) []float64 {
	return r.rotateHessianInto(make([]float64, r.Padded*r.Padded), h, workers)
}

// rotateHessianInto writes R·H·Rᵀ into out (Padded x Padded) and returns it, on up to workers
// goroutines. out may be h itself when no padding is needed (Padded == K): each row is rotated where
// it lies. The rows are rotated independently; the transpose and the final symmetrization go tile
// by tile (16 x 16), each value the same operation as in a plain loop. (The rows of a tile's
// partner are p values apart, a multiple of 4 KiB at 27B widths: in the plain loops, or in tiles of
// 64 or 32, every access to them missed L1. A 17408-wide transpose on one Zen 5 core: 2.0 s in
// tiles of 64, 0.66 s in tiles of 16; the whole rotation of a 17408-wide Hessian on two cores 1.7-1.8
// s against the plain loops' 5.3-5.7 s.)
func (r Rotation) rotateHessianInto(out, h []float64, workers int) []float64 {
	k, p := r.K, r.Padded
	d := r.signVector()
	// rows: out[i] = R·h[i] for i < k (H is symmetric, so rotating rows then columns works)
	forEachRow(k, workers, func(i int) {
		row := out[i*p : (i+1)*p]
		copy(row, h[i*k:(i+1)*k])
		r.rotate64(row, d)
	})
	// columns: H is symmetric, so out = H·Rᵀ has transpose R·H; transpose in place and rotate the
	// rows again (R·H·Rᵀ) — no second p x p buffer
	forUpperTiles(p, workers, func(i0, i1, j0, j1 int) {
		for i := i0; i < i1; i++ {
			for j := max(j0, i+1); j < j1; j++ {
				out[i*p+j], out[j*p+i] = out[j*p+i], out[i*p+j]
			}
		}
	})
	forEachRow(p, workers, func(j int) { r.rotate64(out[j*p:(j+1)*p], d) })
	forUpperTiles(p, workers, func(i0, i1, j0, j1 int) {
		for i := i0; i < i1; i++ {
			for j := max(j0, i+1); j < j1; j++ {
				v := 0.5 * (out[i*p+j] + out[j*p+i]) // symmetric to rounding
				out[i*p+j], out[j*p+i] = v, v
			}
		}
	})
	return out
}

// forEachRow calls f(i) for i in [0, n), rows handed out 16 at a time to up to workers goroutines.
func forEachRow(n, workers int, f func(i int)) {
	const step = 16
	parallel.For((n+step-1)/step, workers, func(b int) {
		for i := b * step; i < min(b*step+step, n); i++ {
			f(i)
		}
	})
}

// forUpperTiles calls f(i0, i1, j0, j1) for every tile [i0, i1) x [j0, j1) of 16 x 16 values on or
// above the diagonal of a p x p matrix (j0 >= i0), a row of tiles at a time to each of up to
// workers goroutines, so that a plain loop over the pairs (i, j > i) within each tile visits every
// pair above the diagonal exactly once.
func forUpperTiles(p, workers int, f func(i0, i1, j0, j1 int)) {
	const bs = 16
	parallel.For((p+bs-1)/bs, workers, func(b int) {
		i0, i1 := b*bs, min(b*bs+bs, p)
		for j0 := i0; j0 < p; j0 += bs {
			f(i0, i1, j0, min(j0+bs, p))
		}
	})
}
