package sparse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Extent is a byte range [Off, Off+Len) of a file.
type Extent struct {
	Off int64 `json:"off"`
	Len int64 `json:"len"`
}

// End returns Off+Len.
func (e Extent) End() int64 { return e.Off + e.Len }

// Len returns the total length of exts.
func Len(exts []Extent) int64 {
	var n int64
	for _, e := range exts {
		n += e.Len
	}
	return n
}

// HasHoles reports whether a file of size bytes with data exts has any byte outside them.
func HasHoles(size int64, exts []Extent) bool { return Len(exts) != size }

// DataExtents returns the data regions of f (size bytes long) in file order, found with
// lseek(SEEK_DATA/SEEK_HOLE). Everything between them is a hole that reads as zeros. A file system
// without SEEK_DATA support reports the whole file as one data extent (correct, merely not sparse).
// Extents are coalesced and never empty; a file of size 0 has none. f's offset is left at 0.
func DataExtents(f *os.File, size int64) ([]Extent, error) {
	var out []Extent
	fd := int(f.Fd())
	off := int64(0)
	for off < size {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil {
			if errors.Is(err, unix.ENXIO) { // no data after off: the rest is a hole
				break
			}
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
				return []Extent{{0, size}}, nil
			}
			return nil, fmt.Errorf("%s: seek data at %d: %w", f.Name(), off, err)
		}
		if start >= size {
			break
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("%s: seek hole at %d: %w", f.Name(), start, err)
		}
		if end > size {
			end = size
		}
		if n := len(out); n > 0 && out[n-1].End() == start {
			out[n-1].Len += end - start
		} else if end > start {
			out = append(out, Extent{Off: start, Len: end - start})
		}
		off = end
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("%s: rewind: %w", f.Name(), err)
	}
	return out, nil
}

// Block is the unit of ContentExtents: 4 KiB, the page and the usual filesystem block.
const Block = 4096

var zeroBlock [Block]byte

// scanChunk is how much ContentExtents reads at once (a multiple of Block).
const scanChunk = 1 << 20

// ContentExtents returns the extents of f (size bytes long) that are not all zero, at Block
// granularity: every Block-aligned block holding a non-zero byte (the last one may be shorter),
// coalesced. They depend only on the bytes, not on where the filesystem has holes (holes are
// skipped without reading, DataExtents; the data is read and compared with zeros). It fails if
// f is shorter than size.
func ContentExtents(ctx context.Context, f *os.File, size int64) ([]Extent, error) {
	segs, err := DataExtents(f, size)
	if err != nil {
		return nil, err
	}
	var out []Extent
	add := func(off, n int64) {
		if k := len(out); k > 0 && out[k-1].End() == off {
			out[k-1].Len += n
			return
		}
		out = append(out, Extent{off, n})
	}
	buf := make([]byte, scanChunk)
	var pos int64 // blocks before pos were examined
	for _, s := range segs {
		end := min(size, (s.End()+Block-1)/Block*Block)
		for off := max(pos, s.Off/Block*Block); off < end; {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			n := min(int64(len(buf)), end-off)
			if _, err := f.ReadAt(buf[:n], off); err != nil {
				return nil, fmt.Errorf("%s: reading %d bytes at %d of %d: %w", f.Name(), n, off, size, err)
			}
			for b := int64(0); b < n; b += Block {
				blk := buf[b:min(b+Block, n)]
				if !bytes.Equal(blk, zeroBlock[:len(blk)]) {
					add(off+b, int64(len(blk)))
				}
			}
			off += n
		}
		pos = max(pos, end)
	}
	return out, nil
}

// Align rounds data extents out to multiples of 512 (an extent's end no further than size),
// merging those that then touch: the extents of the tar form. Extents from DataExtents are
// already aligned to filesystem blocks and ContentExtents to Block, so it changes nothing there.
func Align(exts []Extent, size int64) []Extent {
	var out []Extent
	for _, e := range exts {
		lo, hi := e.Off/tarBlock*tarBlock, min((e.End()+tarBlock-1)/tarBlock*tarBlock, size)
		if n := len(out); n > 0 && out[n-1].End() >= lo {
			out[n-1].Len = max(out[n-1].End(), hi) - out[n-1].Off
			continue
		}
		out = append(out, Extent{lo, hi - lo})
	}
	return out
}

// NewExtentsReader returns a reader over the concatenated bytes of exts in f (pread, no shared
// offset).
func NewExtentsReader(f io.ReaderAt, exts []Extent) io.Reader {
	rs := make([]io.Reader, len(exts))
	for i, e := range exts {
		rs[i] = io.NewSectionReader(f, e.Off, e.Len)
	}
	return io.MultiReader(rs...)
}
