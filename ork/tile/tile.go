package tile

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Tile writes row-major int codes [N][K] into dst (exactly Size() bytes) in the layout. It serves the int8 and
// both int4 kinds; int4 codes must lie in [-8, 7]. Padding, including page padding, is written as zeros.
// int4 layouts of 1 MiB and more are packed by up to GOMAXPROCS goroutines, each writing whole blocks of N
// tiles (rows for I4Compact); the bytes are identical to a serial walk.
func (l Layout) Tile(dst []byte, codes []int8) error {
	if err := l.checkBuffers(len(dst), len(codes)); err != nil {
		return err
	}
	// Every run is written (padding runs as zeros) and then the page padding, so dst needs no clearing pass.
	l.clearPagePadding(dst)
	switch l.kind {
	case I8Native:
		// int8 runs are plain 32-byte copies, bound by memory bandwidth, so this walk stays serial
		// (BenchmarkTileVsCopy; docs/performance.md).
		l.walk(func(n, k0, off int) {
			out := dst[off : off+runLen]
			if n >= l.n || k0 >= l.k {
				clear(out)
				return
			}
			l.putRun(out, codes[n*l.k:(n+1)*l.k], k0)
		})
		return nil
	case I4Native, I4Compact:
		var bad atomic.Bool // set by any worker that saw a code outside [-8, 7]
		l.walkParallel(func(n, k0, off int) {
			if n >= l.n || k0 >= l.k {
				clear(dst[off : off+runLen/2])
				return
			}
			if l.putRun(dst[off:off+runLen/2:off+runLen/2], codes[n*l.k:(n+1)*l.k], k0) {
				bad.Store(true)
			}
		})
		if bad.Load() {
			for i, c := range codes {
				if c < -8 || c > 7 {
					return fmt.Errorf("%w: int4 code %d at n=%d k=%d: want [-8, 7]", ErrRange, c, i/l.k, i%l.k)
				}
			}
		}
		return nil
	}
	return fmt.Errorf("%w: Tile on %s (use TileF16)", ErrWrongKind, l.kind)
}

// packRunGo packs 32 int4 codes into 16 bytes in nibble order o and reports whether any code was outside
// [-8, 7]: the reference of packRun (the hot loop of int4 tiling; an SSE2 kernel on amd64).
func packRunGo(out []byte, run []int8, o NibbleOrder) (outOfRange bool) {
	_ = out[runLen/2-1]
	_ = run[runLen-1]
	var acc uint8
	if o == LowFirst {
		for j := 0; j < runLen/2; j++ {
			a, b := run[2*j], run[2*j+1]
			acc |= uint8(a+8) | uint8(b+8)
			out[j] = byte(a)&0xf | byte(b)<<4
		}
	} else {
		for j := 0; j < runLen/2; j++ {
			a, b := run[2*j], run[2*j+1]
			acc |= uint8(a+8) | uint8(b+8)
			out[j] = byte(a)<<4 | byte(b)&0xf
		}
	}
	return acc > 15
}

// unpackRunGo is packRunGo's inverse: 16 bytes to 32 sign-extended int4 codes (unpackRun's reference).
func unpackRunGo(run []int8, in []byte, o NibbleOrder) {
	_ = run[runLen-1]
	_ = in[runLen/2-1]
	if o == LowFirst {
		for j := 0; j < runLen/2; j++ {
			x := in[j]
			run[2*j], run[2*j+1] = int8(x<<4)>>4, int8(x)>>4
		}
		return
	}
	for j := 0; j < runLen/2; j++ {
		x := in[j]
		run[2*j], run[2*j+1] = int8(x)>>4, int8(x<<4)>>4
	}
}

// TileF16 writes row-major binary16 values [N][K] into dst (exactly Size() bytes) in the fp16 native layout.
func (l Layout) TileF16(dst []byte, vals []uint16) error {
	if l.kind != F16Native {
		return fmt.Errorf("%w: TileF16 on %s", ErrWrongKind, l.kind)
	}
	if err := l.checkBuffers(len(dst), len(vals)); err != nil {
		return err
	}
	l.clearPagePadding(dst)
	l.walk(func(n, k0, off int) {
		clear(dst[off : off+2*runLen])
		if n >= l.n || k0 >= l.k {
			return
		}
		row := vals[n*l.k : (n+1)*l.k]
		for i, v := range row[k0:min(k0+runLen, l.k)] {
			binary.LittleEndian.PutUint16(dst[off+2*i:], v)
		}
	})
	return nil
}

// Untile reads the layout's bytes back into row-major int codes [N][K] (int8 and int4 kinds; int4 codes are
// sign-extended). It fails if any padding element or page-padding byte is non-zero: a layout mismatch between
// writer and reader shows up there first.
func (l Layout) Untile(codes []int8, src []byte) error {
	if err := l.checkBuffers(len(src), len(codes)); err != nil {
		return err
	}
	var bad error
	switch l.kind {
	case I8Native:
		dst := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(codes))), len(codes))
		l.walk(func(n, k0, off int) {
			run := src[off : off+runLen]
			if n >= l.n {
				bad = firstErr(bad, l.checkZero(run, n, k0))
				return
			}
			end := min(k0+runLen, l.k)
			if k0 < l.k {
				copy(dst[n*l.k+k0:n*l.k+end], run)
			}
			bad = firstErr(bad, l.checkZero(run[max(end-k0, 0):], n, max(end, k0)))
		})
	case I4Native, I4Compact:
		l.walk(func(n, k0, off int) {
			run := src[off : off+runLen/2]
			if n >= l.n {
				bad = firstErr(bad, l.checkZero(run, n, k0))
				return
			}
			if k0+runLen <= l.k {
				unpackRun(codes[n*l.k+k0:n*l.k+k0+runLen:n*l.k+k0+runLen], run, l.nib)
				return
			}
			for i := 0; i < runLen; i++ {
				c := int8(run[i/2]>>nibbleShift(i, l.nib)<<4) >> 4
				switch {
				case k0+i < l.k:
					codes[n*l.k+k0+i] = c
				case c != 0 && bad == nil:
					bad = fmt.Errorf("%w: %s code %d at padding n=%d k=%d", ErrPadding, l.kind, c, n, k0+i)
				}
			}
		})
	default:
		return fmt.Errorf("%w: Untile on %s (use UntileF16)", ErrWrongKind, l.kind)
	}
	if bad != nil {
		return bad
	}
	return l.checkPagePadding(src)
}

// UntileF16 reads the fp16 native layout back into row-major binary16 values [N][K].
func (l Layout) UntileF16(vals []uint16, src []byte) error {
	if l.kind != F16Native {
		return fmt.Errorf("%w: UntileF16 on %s", ErrWrongKind, l.kind)
	}
	if err := l.checkBuffers(len(src), len(vals)); err != nil {
		return err
	}
	var bad error
	l.walk(func(n, k0, off int) {
		run := src[off : off+2*runLen]
		for i := 0; i < runLen; i++ {
			v := binary.LittleEndian.Uint16(run[2*i:])
			switch {
			case n < l.n && k0+i < l.k:
				vals[n*l.k+k0+i] = v
			case v != 0 && bad == nil:
				bad = fmt.Errorf("%w: fp16 value %#04x at padding n=%d k=%d", ErrPadding, v, n, k0+i)
			}
		}
	})
	if bad != nil {
		return bad
	}
	return l.checkPagePadding(src)
}

func (l Layout) checkBuffers(bytes, elems int) error {
	if bytes != l.Size() {
		return fmt.Errorf("%w: %s: layout buffer has %d bytes, want %d", ErrSize, l, bytes, l.Size())
	}
	if elems != l.k*l.n {
		return fmt.Errorf("%w: %s: %d codes, want K*N = %d", ErrSize, l, elems, l.k*l.n)
	}
	return nil
}

func (l Layout) checkZero(b []byte, n, k int) error {
	for _, c := range b {
		if c != 0 {
			return fmt.Errorf("%w: %s byte %#02x in padding run at n=%d k>=%d", ErrPadding, l.kind, c, n, k)
		}
	}
	return nil
}

// clearPagePadding zeroes the bytes between each segment's end and the next page.
func (l Layout) clearPagePadding(dst []byte) {
	for s := 0; s < l.segs; s++ {
		clear(dst[l.segOff[s]+l.SegmentBytes(s) : l.segOff[s+1]])
	}
}

// checkPagePadding verifies the zero bytes between each segment's end and the next page.
func (l Layout) checkPagePadding(src []byte) error {
	for s := 0; s < l.segs; s++ {
		start := l.segOff[s] + l.SegmentBytes(s)
		for i, c := range src[start:l.segOff[s+1]] {
			if c != 0 {
				return fmt.Errorf("%w: %s byte %#02x at offset %d in the page padding of segment %d", ErrPadding, l.kind, c, start+i, s)
			}
		}
	}
	return nil
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Inflate converts int4 codes stored in layout from (I4Compact or I4Native) into int8 codes in layout to
// (I8Native of the same K and N), as the board loader does at load time for I4 and I4_ROT_A8 weights.
// It decodes through the untiler, so it agrees with the writer by construction.
func Inflate(dst []byte, to Layout, src []byte, from Layout) error {
	if from.kind != I4Compact && from.kind != I4Native {
		return fmt.Errorf("%w: inflate from %s", ErrWrongKind, from.kind)
	}
	if to.kind != I8Native || to.k != from.k || to.n != from.n {
		return fmt.Errorf("%w: inflate %s into %s", ErrShape, from, to)
	}
	codes := make([]int8, from.k*from.n)
	if err := from.Untile(codes, src); err != nil {
		return err
	}
	return to.Tile(dst, codes)
}

// CheckPadding verifies, without decoding, what Untile would reject in buf: the layout size, and that every
// padding element (k >= K or n >= N) and every page-padding byte is zero. Every non-padding byte pattern is a
// valid code, so a buffer that passes decodes. It walks the same runs as Tile and Untile.
func (l Layout) CheckPadding(buf []byte) error {
	if len(buf) != l.Size() {
		return fmt.Errorf("%w: %s: layout buffer has %d bytes, want %d", ErrSize, l, len(buf), l.Size())
	}
	runBytes := runLen * l.elemBits() / 8
	var bad error
	l.walk(func(n, k0, off int) {
		if bad != nil || (n < l.n && k0+runLen <= l.k) {
			return
		}
		run := buf[off : off+runBytes]
		if n >= l.n || k0 >= l.k {
			bad = l.checkZero(run, n, k0)
			return
		}
		// A partial run: the codes from K on are padding.
		valid := l.k - k0
		switch l.kind {
		case I8Native:
			bad = l.checkZero(run[valid:], n, l.k)
		case F16Native:
			bad = l.checkZero(run[2*valid:], n, l.k)
		default:
			for i := valid; i < runLen; i++ {
				if c := run[i/2] >> nibbleShift(i, l.nib) & 0xf; c != 0 {
					bad = fmt.Errorf("%w: %s code %d at padding n=%d k=%d", ErrPadding, l.kind, int8(c<<4)>>4, n, k0+i)
					return
				}
			}
		}
	})
	if bad != nil {
		return bad
	}
	return l.checkPagePadding(buf)
}
