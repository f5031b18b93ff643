// Package tile lays quantized matmul weights out the way the RK3588 NPU's matmul reads them, and back.
//
// A weight has N output channels (rows) of K input features; codes arrive row-major [N][K]. The layouts, with
// Kp = K rounded up to 32, Np = N rounded up to the tile width W, and K split into segments of at most SK
// (default 8192) padded elements:
//
//	int8 native  (Np/32, Ks/32, 32, 32)  1 byte per code
//	int4 native  (Np/64, Ks/32, 64, 32)  2 codes per byte, nibble order a parameter
//	fp16 native  (Np/16, Ks/32, 16, 32)  2 bytes per value, little-endian
//	int4 compact row-major [N][Kp] nibbles, one segment (the container the loader inflates to int8 at load)
//
// Each segment is padded with zero bytes to the page size (4096). Padding codes (k >= K, n >= N) are zero.
// The exact byte formulas are in docs/orkpack.md section 2.2.
//
// The tiler and the untiler are one walk: both enumerate the same runs (32 consecutive k of one row, stored
// contiguously) through Layout.walk, and Layout.Locate answers for a single element from the same run
// arithmetic, so the two directions cannot drift apart.
package tile

import (
	"errors"
	"fmt"
)

// Kind is a codes layout.
type Kind uint8

// The layouts.
const (
	I8Native  Kind = 1 // int8 (N/32, K/32, 32, 32)
	I4Native  Kind = 2 // int4 (N/64, K/32, 64, 32)
	F16Native Kind = 3 // fp16 (N/16, K/32, 16, 32)
	I4Compact Kind = 4 // int4 row-major nibbles [N][Kp]
)

func (k Kind) String() string {
	switch k {
	case I8Native:
		return "int8-native"
	case I4Native:
		return "int4-native"
	case F16Native:
		return "fp16-native"
	case I4Compact:
		return "int4-compact"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// NibbleOrder says which half of a byte holds the code with the even k of a pair.
type NibbleOrder uint8

// Nibble orders.
const (
	LowFirst  NibbleOrder = 0 // even k in bits 0..3 (default)
	HighFirst NibbleOrder = 1 // even k in bits 4..7
)

func (o NibbleOrder) String() string {
	switch o {
	case LowFirst:
		return "low-first"
	case HighFirst:
		return "high-first"
	}
	return fmt.Sprintf("nibble-order(%d)", uint8(o))
}

// Defaults and limits.
const (
	DefaultPageSize = 4096
	DefaultSegmentK = 8192
	MaxDim          = 1 << 24 // largest K or N accepted
	runLen          = 32      // codes per run (the tile's K width)
)

// Errors.
var (
	ErrShape     = errors.New("tile: bad shape")
	ErrOption    = errors.New("tile: bad option")
	ErrRange     = errors.New("tile: code out of range")
	ErrPadding   = errors.New("tile: non-zero padding")
	ErrSize      = errors.New("tile: buffer size mismatch")
	ErrWrongKind = errors.New("tile: wrong layout kind for this operation")
)

// Layout is the validated geometry of one weight in one layout. The zero value is not usable; use New.
type Layout struct {
	kind   Kind
	k, n   int
	kp, np int
	segK   int // 0 for compact
	segs   int
	page   int
	nib    NibbleOrder
	segOff []int // byte offset of each segment's start inside the codes region, len segs+1 (last = Size)
}

// Option configures New. Options validate their own argument.
type Option func(*Layout) error

// WithSegmentK sets the maximum padded K of one native segment (a positive multiple of 32).
func WithSegmentK(sk int) Option {
	return func(l *Layout) error {
		if sk <= 0 || sk%runLen != 0 || sk > MaxDim {
			return fmt.Errorf("%w: segment K %d: want a positive multiple of 32", ErrOption, sk)
		}
		l.segK = sk
		return nil
	}
}

// WithPageSize sets the page each segment is padded to (a power of two, at least 64).
func WithPageSize(p int) Option {
	return func(l *Layout) error {
		if p < 64 || p&(p-1) != 0 || p > 1<<30 {
			return fmt.Errorf("%w: page size %d: want a power of two >= 64", ErrOption, p)
		}
		l.page = p
		return nil
	}
}

// WithNibbleOrder sets the int4 nibble order.
func WithNibbleOrder(o NibbleOrder) Option {
	return func(l *Layout) error {
		if o != LowFirst && o != HighFirst {
			return fmt.Errorf("%w: nibble order %d: want 0 (low first) or 1 (high first)", ErrOption, o)
		}
		l.nib = o
		return nil
	}
}

// New validates a shape and returns its layout.
func New(kind Kind, k, n int, opts ...Option) (Layout, error) {
	l := Layout{kind: kind, k: k, n: n, segK: DefaultSegmentK, page: DefaultPageSize}
	for _, o := range opts {
		if err := o(&l); err != nil {
			return Layout{}, err
		}
	}
	if k < 1 || n < 1 || k > MaxDim || n > MaxDim {
		return Layout{}, fmt.Errorf("%w: K=%d N=%d: each must be in [1, %d]", ErrShape, k, n, MaxDim)
	}
	l.kp = roundUp(k, runLen)
	switch kind {
	case I8Native:
		l.np = roundUp(n, 32)
	case I4Native:
		l.np = roundUp(n, 64)
	case F16Native:
		l.np = roundUp(n, 16)
	case I4Compact:
		l.np = n
		l.segK = 0
	default:
		return Layout{}, fmt.Errorf("%w: unknown layout kind %d", ErrShape, kind)
	}
	if kind != I4Native && kind != I4Compact {
		l.nib = LowFirst
	}
	if l.segK == 0 {
		l.segs = 1
	} else {
		l.segs = (l.kp + l.segK - 1) / l.segK
	}
	l.segOff = make([]int, l.segs+1)
	for s := 0; s < l.segs; s++ {
		l.segOff[s+1] = l.segOff[s] + roundUp(l.SegmentBytes(s), l.page)
	}
	return l, nil
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }

// Kind returns the layout kind.
func (l Layout) Kind() Kind { return l.kind }

// K returns the unpadded number of input features.
func (l Layout) K() int { return l.k }

// N returns the unpadded number of output channels.
func (l Layout) N() int { return l.n }

// Kp returns K padded to 32.
func (l Layout) Kp() int { return l.kp }

// Np returns N padded to the tile width (N itself for the compact layout).
func (l Layout) Np() int { return l.np }

// SegmentK returns the maximum padded K of one segment (0 for the compact layout).
func (l Layout) SegmentK() int { return l.segK }

// Segments returns the number of K segments.
func (l Layout) Segments() int { return l.segs }

// PageSize returns the page each segment is padded to.
func (l Layout) PageSize() int { return l.page }

// NibbleOrder returns the int4 nibble order (LowFirst for non-int4 kinds).
func (l Layout) NibbleOrder() NibbleOrder { return l.nib }

// TileWidth returns W, the tile width in N (0 for the compact layout).
func (l Layout) TileWidth() int {
	switch l.kind {
	case I8Native:
		return 32
	case I4Native:
		return 64
	case F16Native:
		return 16
	}
	return 0
}

// elemBits is the stored width of one code.
func (l Layout) elemBits() int {
	switch l.kind {
	case I8Native:
		return 8
	case F16Native:
		return 16
	}
	return 4
}

// SegmentRange returns the first padded k of segment s and its width.
func (l Layout) SegmentRange(s int) (k0, width int) {
	if l.segK == 0 {
		return 0, l.kp
	}
	k0 = s * l.segK
	return k0, min(l.kp, k0+l.segK) - k0
}

// SegmentBytes returns the unpadded byte length of segment s.
func (l Layout) SegmentBytes(s int) int {
	_, w := l.SegmentRange(s)
	return l.np * w * l.elemBits() / 8
}

// SegmentOffset returns the byte offset of segment s inside the codes region.
func (l Layout) SegmentOffset(s int) int { return l.segOff[s] }

// Size returns the byte length of the codes region: the sum of the page-padded segments.
func (l Layout) Size() int { return l.segOff[l.segs] }

// runOffset is THE index arithmetic: the byte offset of the run of 32 codes of row n that starts at padded
// k0 (a multiple of 32). Every other position in this package derives from it.
func (l Layout) runOffset(n, k0 int) int {
	if l.kind == I4Compact {
		return (n*l.kp + k0) / 2
	}
	s := 0
	if l.segs > 1 {
		s = k0 / l.segK
	}
	seg0, ks := l.SegmentRange(s)
	kk := k0 - seg0
	w := l.TileWidth()
	elem := ((n/w)*(ks/runLen)+kk/runLen)*w*runLen + (n%w)*runLen
	return l.segOff[s] + elem*l.elemBits()/8
}

// walk calls fn for every run of the padded [Np][Kp] matrix, in storage order of the native layouts (segment,
// N tile, K tile, row in tile). fn receives the row, the first k of the run and the run's byte offset.
func (l Layout) walk(fn func(n, k0, off int)) {
	l.walkRows(fn, 0, l.walkRowCount())
}

// walkRowCount is the number of rows walk visits: Np for the native layouts, N for I4Compact.
func (l Layout) walkRowCount() int {
	if l.kind == I4Compact {
		return l.n
	}
	return l.np
}

// walkRowUnit is the granularity of a row range given to walkRows: the tile width for the native
// layouts (a tile's rows are stored together), one row for I4Compact.
func (l Layout) walkRowUnit() int {
	if l.kind == I4Compact {
		return 1
	}
	return l.TileWidth()
}

// walkRows is walk restricted to the rows [n0, n1) (multiples of walkRowUnit, or n1 = walkRowCount),
// in the same order within that range.
func (l Layout) walkRows(fn func(n, k0, off int), n0, n1 int) {
	if l.kind == I4Compact {
		for n := n0; n < n1; n++ {
			for k0 := 0; k0 < l.kp; k0 += runLen {
				fn(n, k0, l.runOffset(n, k0))
			}
		}
		return
	}
	w := l.TileWidth()
	runBytes := runLen * l.elemBits() / 8
	for s := 0; s < l.segs; s++ {
		seg0, ks := l.SegmentRange(s)
		for nt := n0; nt < n1; nt += w {
			for kt := seg0; kt < seg0+ks; kt += runLen {
				// The rows of one tile are consecutive runs: tile base + r*runBytes (TestWalkMatchesLocate).
				base := l.runOffset(nt, kt)
				for r := 0; r < w; r++ {
					fn(nt+r, kt, base+r*runBytes)
				}
			}
		}
	}
}

// Locate returns where code (n, k) is stored: its byte offset in the codes region and, for int4 kinds, the bit
// shift of its nibble (0 or 4). For fp16 the value occupies bytes off and off+1 (little-endian).
func (l Layout) Locate(n, k int) (off int, shift uint) {
	k0 := k &^ (runLen - 1)
	i := k - k0
	base := l.runOffset(n, k0)
	switch l.kind {
	case I8Native:
		return base + i, 0
	case F16Native:
		return base + 2*i, 0
	}
	return base + i/2, nibbleShift(i, l.nib)
}

// nibbleShift returns the bit shift of the code at index i within a run (pairs share a byte).
func nibbleShift(i int, o NibbleOrder) uint {
	even := i%2 == 0
	if even == (o == LowFirst) {
		return 0
	}
	return 4
}

func (l Layout) String() string {
	return fmt.Sprintf("%s K=%d N=%d (Kp=%d Np=%d, %d segment(s), %d bytes)", l.kind, l.k, l.n, l.kp, l.np, l.segs, l.Size())
}
