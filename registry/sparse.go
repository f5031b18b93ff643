package registry

import (
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

// dataExtents returns the data regions of f (size bytes long) in file order, found with
// lseek(SEEK_DATA/SEEK_HOLE). Everything between them is a hole that reads as zeros. A file system
// without SEEK_DATA support reports the whole file as one data extent (correct, merely not sparse).
// Extents are coalesced and never empty; a file of size 0 has none.
func dataExtents(f *os.File, size int64) ([]Extent, error) {
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

// extentsReader returns a reader over the concatenated bytes of exts in f (pread, no shared offset).
func extentsReader(f io.ReaderAt, exts []Extent) io.Reader {
	rs := make([]io.Reader, len(exts))
	for i, e := range exts {
		rs[i] = io.NewSectionReader(f, e.Off, e.Len)
	}
	return io.MultiReader(rs...)
}

// extentsLen returns the total length of exts.
func extentsLen(exts []Extent) int64 {
	var n int64
	for _, e := range exts {
		n += e.Len
	}
	return n
}
