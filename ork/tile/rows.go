package tile

import (
	"fmt"
	"unsafe"
)

// TileRows writes the rows [first, first+len(codes)/K) of row-major int codes into dst (exactly Size()
// bytes) as Tile lays them out: the bytes of those rows' runs and nothing else. Calls that together cover
// every row once, with ClearPadding, leave dst byte for byte what Tile writes, whatever dst held before.
// Calls for different rows may run concurrently: runs of different rows never share a byte. It serves the
// int8 and both int4 kinds; int4 codes must lie in [-8, 7].
func (l Layout) TileRows(dst []byte, first int, codes []int8) error {
	if l.kind != I8Native && l.kind != I4Native && l.kind != I4Compact {
		return fmt.Errorf("%w: TileRows on %s", ErrWrongKind, l.kind)
	}
	if len(dst) != l.Size() {
		return fmt.Errorf("%w: %s: layout buffer has %d bytes, want %d", ErrSize, l, len(dst), l.Size())
	}
	rows := len(codes) / l.k
	if len(codes)%l.k != 0 || first < 0 || first+rows > l.n {
		return fmt.Errorf("%w: %s: %d codes from row %d, want whole rows of K inside N", ErrSize, l, len(codes), first)
	}
	// Inside a segment the runs of one row are a fixed stride apart: one tile of W rows (native) or one
	// run (compact).
	runBytes := runLen * l.elemBits() / 8
	stride := runBytes
	if l.kind != I4Compact {
		stride = l.TileWidth() * runBytes
	}
	for r := 0; r < rows; r++ {
		n := first + r
		row := codes[r*l.k : (r+1)*l.k]
		for s := 0; s < l.segs; s++ {
			seg0, ks := l.SegmentRange(s)
			off, k0 := l.runOffset(n, seg0), seg0
			if l.kind != I8Native { // the whole int4 runs of the segment in one call
				full := (min(seg0+ks, l.k) - seg0) / runLen
				if packRuns(dst[off:], stride, row[seg0:seg0+full*runLen], l.nib) {
					return l.rangeErr(row, n)
				}
				off, k0 = off+full*stride, seg0+full*runLen
			}
			for ; k0 < seg0+ks; k0 += runLen {
				if l.putRun(dst[off:off+runBytes:off+runBytes], row, k0) {
					return l.rangeErr(row, n)
				}
				off += stride
			}
		}
	}
	return nil
}

// ClearPadding zeroes the bytes of dst (exactly Size() bytes) that no row's run holds: the padding rows
// (N <= n < Np) and each segment's page padding (TileRows).
func (l Layout) ClearPadding(dst []byte) error {
	if len(dst) != l.Size() {
		return fmt.Errorf("%w: %s: layout buffer has %d bytes, want %d", ErrSize, l, len(dst), l.Size())
	}
	l.clearPagePadding(dst)
	if l.np == l.n {
		return nil
	}
	runBytes := runLen * l.elemBits() / 8
	unit := l.walkRowUnit()
	l.walkRows(func(n, _, off int) {
		if n >= l.n {
			clear(dst[off : off+runBytes])
		}
	}, l.n/unit*unit, l.np)
	return nil
}

// putRun writes the run of row (one row's K codes) that starts at k0 < K into out (the run's bytes: 32 for
// int8, 16 for int4), padding codes (k >= K) as zeros, and reports whether an int4 code was outside [-8, 7].
func (l Layout) putRun(out []byte, row []int8, k0 int) (outOfRange bool) {
	if l.kind == I8Native {
		src := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(row))), len(row))
		if c := copy(out, src[k0:min(k0+runLen, l.k)]); c < runLen {
			clear(out[c:])
		}
		return false
	}
	if k0+runLen <= l.k {
		return packRun(out, row[k0:k0+runLen:k0+runLen], l.nib)
	}
	// The last, partial run of a row.
	clear(out)
	for i := 0; i < l.k-k0; i++ {
		c := row[k0+i]
		if c < -8 || c > 7 {
			outOfRange = true
		}
		out[i/2] |= byte(c&0xf) << nibbleShift(i, l.nib)
	}
	return outOfRange
}

// rangeErr names the first int4 code of row n outside [-8, 7].
func (l Layout) rangeErr(row []int8, n int) error {
	for k, c := range row {
		if c < -8 || c > 7 {
			return fmt.Errorf("%w: int4 code %d at n=%d k=%d: want [-8, 7]", ErrRange, c, n, k)
		}
	}
	return fmt.Errorf("%w: int4 code out of range in row %d", ErrRange, n)
}
