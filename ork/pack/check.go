package pack

import (
	"fmt"
	"math"
	"sort"

	"orkpipe/ork/tile"
)

// runCodes is how many codes one run of a codes layout holds (docs/orkpack.md 2.2: the tiles' K width, and
// the unit of the compact layout's rows).
const runCodes = 32

// dataCheck checks an entry's data piece by piece for exactly what decoding (decodeInto, the untiler)
// rejects, without decoding it: a non-zero padding code (row n >= N or column k >= K, docs/orkpack.md 2.2),
// a non-zero page-padding byte after a codes segment or after the scales, and a scale that is not finite.
// Every other byte pattern decodes. It holds nothing of the data, so an entry of any size is checked
// through a bounded buffer (verifyEntry).
type dataCheck struct {
	e        Entry
	l        tile.Layout
	runBytes int // bytes of one run of runCodes codes: 16 (int4), 32 (int8) or 64 (fp16)
}

func newDataCheck(e Entry) (*dataCheck, error) {
	l, err := e.Layout()
	if err != nil {
		return nil, err
	}
	if int64(l.Size()) != e.CodesLength {
		return nil, fmt.Errorf("%w: entry %q: layout %s, index says %d bytes of codes", ErrCorrupt, e.Name, l, e.CodesLength)
	}
	return &dataCheck{e: e, l: l, runBytes: runCodes * e.DType.Bits() / 8}, nil
}

// check checks b, the entry's data at [off, off+len(b)). Every segment and the scales start on a page, a
// page holds whole runs (and whole tiles of the native layouts: 1024 bytes in each) and whole scales, so
// b may be any piece whose off is a multiple of PageSize; pieces checked in any order, together covering
// the data, check all of it.
func (c *dataCheck) check(off int64, b []byte) error {
	if off%PageSize != 0 || off < 0 || off+int64(len(b)) > c.e.Length {
		return fmt.Errorf("%w: entry %q: data piece at %d+%d: want a page-aligned piece of the entry's %d bytes", ErrCorrupt, c.e.Name, off, len(b), c.e.Length)
	}
	if n := min(int64(len(b)), max(0, c.e.CodesLength-off)); n > 0 {
		if err := c.codes(int(off), b[:n]); err != nil {
			return err
		}
		off, b = off+n, b[n:]
	}
	return c.scales(off, b)
}

// codes checks the codes bytes b at [off, off+len(b)) of the codes region, segment by segment.
func (c *dataCheck) codes(off int, b []byte) error {
	l := c.l
	end := off + len(b)
	s := sort.Search(l.Segments(), func(s int) bool { return l.SegmentOffset(s+1) > off })
	for ; s < l.Segments() && l.SegmentOffset(s) < end; s++ {
		start, data, next := l.SegmentOffset(s), l.SegmentOffset(s)+l.SegmentBytes(s), l.SegmentOffset(s+1)
		if lo, hi := max(off, start), min(end, data); lo < hi {
			if err := c.runs(s, lo-start, b[lo-off:hi-off], lo); err != nil {
				return err
			}
		}
		for p := max(off, data); p < min(end, next); p++ {
			if v := b[p-off]; v != 0 {
				return fmt.Errorf("%w: entry %q: %w: byte %#02x at entry byte %d, in the page padding of codes segment %d: want 0", ErrCorrupt, c.e.Name, tile.ErrPadding, v, p, s)
			}
		}
	}
	return nil
}

// runs checks the padding codes among the bytes b of segment s, from byte p of its data (a multiple of
// runBytes; of a tile's bytes for the native layouts), which is byte at of the entry.
func (c *dataCheck) runs(s, p int, b []byte, at int) error {
	l := c.l
	k0s, ks := l.SegmentRange(s)
	kts := ks / runCodes // runs along K in one row of the segment
	if l.Kind() == tile.I4Compact {
		// Row-major runs (N = Np): only the last run of each row can hold padding, when K % 32 != 0.
		if l.K()%runCodes == 0 {
			return nil
		}
		q0 := p / c.runBytes
		for q := q0 + (kts-1-q0%kts+kts)%kts; (q-q0)*c.runBytes < len(b); q += kts {
			if err := c.run(q/kts, (kts-1)*runCodes, b[(q-q0)*c.runBytes:], at+(q-q0)*c.runBytes); err != nil {
				return err
			}
		}
		return nil
	}
	// Native layouts: tiles of W rows of one run each, N tile by N tile, K tile by K tile within.
	w := l.TileWidth()
	tb := w * c.runBytes
	for t0 := 0; t0 < len(b); t0 += tb {
		t := (p + t0) / tb
		n0, k0 := t/kts*w, k0s+t%kts*runCodes
		if n0+w <= l.N() && k0+runCodes <= l.K() {
			continue // no padding in this tile
		}
		for r := 0; r < w; r++ {
			if err := c.run(n0+r, k0, b[t0+r*c.runBytes:], at+t0+r*c.runBytes); err != nil {
				return err
			}
		}
	}
	return nil
}

// run checks the run of row n from column k0 whose bytes start b, at byte at of the entry. Codes at
// n >= N or k >= K are padding and must be zero.
func (c *dataCheck) run(n, k0 int, b []byte, at int) error {
	valid := 0 // codes of the run that are not padding
	if n < c.l.N() {
		valid = min(runCodes, c.l.K()-k0)
	}
	if valid == runCodes {
		return nil
	}
	bad := func(k int) error {
		return fmt.Errorf("%w: entry %q: %w: padding code at n=%d k=%d (entry byte %d) is not zero", ErrCorrupt, c.e.Name, tile.ErrPadding, n, k, at+(k-k0)*c.runBytes/runCodes)
	}
	if !c.e.DType.Int4() {
		width := c.runBytes / runCodes
		for i := valid * width; i < c.runBytes; i++ {
			if b[i] != 0 {
				return bad(k0 + i/width)
			}
		}
		return nil
	}
	for i := valid; i < runCodes; i++ {
		if b[i/2]>>nibbleShift(i, c.l.NibbleOrder())&0xf != 0 {
			return bad(k0 + i)
		}
	}
	return nil
}

// nibbleShift is where code i of a run sits in its byte (docs/orkpack.md 2.2): an even i in the low
// nibble with low-first order, in the high one with high-first order.
func nibbleShift(i int, o tile.NibbleOrder) uint {
	if (i%2 == 0) == (o == tile.LowFirst) {
		return 0
	}
	return 4
}

// scales checks the bytes b at [off, off+len(b)) of the entry from the scales on (off >= CodesLength):
// each scale finite, the page padding after them zero.
func (c *dataCheck) scales(off int64, b []byte) error {
	e := c.e
	for i := 0; i < len(b); {
		p := off + int64(i)
		if p < e.ScalesOffset+e.ScalesLength {
			if bits := le.Uint32(b[i:]); bits>>23&0xff == 0xff { // exponent all ones: NaN or ±Inf
				return fmt.Errorf("%w: entry %q: scale %d is %v", ErrCorrupt, e.Name, (p-e.ScalesOffset)/4, math.Float32frombits(bits))
			}
			i += 4
			continue
		}
		if b[i] != 0 {
			return fmt.Errorf("%w: entry %q: scales padding byte %d is %#02x", ErrCorrupt, e.Name, p-e.ScalesOffset-e.ScalesLength, b[i])
		}
		i++
	}
	return nil
}
