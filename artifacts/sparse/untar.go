package sparse

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Entry is the file a tar form declares: its name, size and data extents.
type Entry struct {
	Name    string
	Size    int64
	Extents []Extent
}

// maxPax bounds the pax records of a tar form (a few names and numbers).
const maxPax = 64 << 10

// ReadTar reads a tar form from r and writes its file into dst: the data at its extents, every
// other byte a hole (dst is truncated to the file's size; it should be empty). The archive must
// be exactly what TarHeader, the data and TarTrailer make for the entry it declares — nothing
// before, between or after — or the error wraps ErrBadTar naming what differs. Where r and dst
// are files, the data is copied by the kernel (copy_file_range).
func ReadTar(ctx context.Context, r io.Reader, dst *os.File) (Entry, error) {
	var head bytes.Buffer // the header bytes read, compared with TarHeader's
	var at int64          // archive offset
	read := func(n int64, what string) ([]byte, error) {
		b := make([]byte, n)
		k, err := io.ReadFull(r, b)
		at += int64(k)
		if err != nil {
			return nil, fmt.Errorf("%w: %s at offset %d: %v", ErrBadTar, what, at, err)
		}
		head.Write(b)
		return b, nil
	}
	blk, err := read(tarBlock, "pax header block")
	if err != nil {
		return Entry{}, err
	}
	if blk[156] != 'x' {
		return Entry{}, fmt.Errorf("%w: the first entry is of type %q, want a pax header ('x')", ErrBadTar, blk[156])
	}
	n, err := parseOctal(blk[124:136])
	if err != nil || n <= 0 || n > maxPax {
		return Entry{}, fmt.Errorf("%w: pax header size %d (%v), want 1..%d", ErrBadTar, n, err, maxPax)
	}
	pax, err := read(n+pad(n), "pax records")
	if err != nil {
		return Entry{}, err
	}
	recs, err := parsePax(pax[:n])
	if err != nil {
		return Entry{}, err
	}
	ustar, err := read(tarBlock, "ustar header")
	if err != nil {
		return Entry{}, err
	}
	entrySize, err := parseOctal(ustar[124:136])
	if s, ok := recs["size"]; ok {
		entrySize, err = strconv.ParseInt(s, 10, 64)
	}
	if err != nil || entrySize < 0 {
		return Entry{}, fmt.Errorf("%w: entry size %d (%v)", ErrBadTar, entrySize, err)
	}
	var e Entry
	if name, ok := recs["GNU.sparse.name"]; ok {
		e.Name = name
		if e.Size, err = strconv.ParseInt(recs["GNU.sparse.realsize"], 10, 64); err != nil || e.Size < 0 {
			return Entry{}, fmt.Errorf("%w: GNU.sparse.realsize %q", ErrBadTar, recs["GNU.sparse.realsize"])
		}
		if e.Extents, err = readMap(read, e.Size, entrySize); err != nil {
			return Entry{}, err
		}
	} else {
		e.Name, e.Size = recs["path"], entrySize
		if e.Size > 0 {
			e.Extents = []Extent{{0, e.Size}}
		}
	}
	if e.Name == "" {
		return Entry{}, fmt.Errorf("%w: no file name (pax path or GNU.sparse.name)", ErrBadTar)
	}
	if err := checkExtents(e.Extents, e.Size); err != nil {
		return Entry{}, fmt.Errorf("%w: %s: %v", ErrBadTar, e.Name, err)
	}
	if !bytes.Equal(head.Bytes(), TarHeader(e.Name, e.Size, e.Extents)) {
		return Entry{}, fmt.Errorf("%w: %s: the header is not the one of a file of %d bytes with %d data extents", ErrBadTar, e.Name, e.Size, len(e.Extents))
	}
	for _, x := range e.Extents {
		if _, err := dst.Seek(x.Off, io.SeekStart); err != nil {
			return Entry{}, fmt.Errorf("%s: seek to %d: %w", dst.Name(), x.Off, err)
		}
		for left := x.Len; left > 0; {
			if err := ctx.Err(); err != nil {
				return Entry{}, err
			}
			k, err := io.CopyN(dst, r, min(left, copyChunk))
			at += k
			if err == io.EOF {
				return Entry{}, fmt.Errorf("%w: %s: the archive ends at offset %d, inside the data of [%d,+%d)", ErrBadTar, e.Name, at, x.Off, x.Len)
			}
			if err != nil {
				return Entry{}, fmt.Errorf("%s: writing [%d,+%d): %w", dst.Name(), x.Off, x.Len, err)
			}
			left -= k
		}
	}
	trailer := TarTrailer(Len(e.Extents))
	got := make([]byte, len(trailer)+1)
	k, err := io.ReadFull(r, got)
	if err != io.ErrUnexpectedEOF || k != len(trailer) || !bytes.Equal(got[:k], trailer) {
		return Entry{}, fmt.Errorf("%w: %s: after the data at offset %d: %d bytes, want the %d zero bytes that end the archive and nothing more", ErrBadTar, e.Name, at, k, len(trailer))
	}
	if err := dst.Truncate(e.Size); err != nil {
		return Entry{}, fmt.Errorf("%s: %w", dst.Name(), err)
	}
	return e, nil
}

// readMap reads the GNU sparse 1.0 map at the start of the entry's data (entrySize bytes): the
// data extents of a file of size bytes, without the map's empty last entry at size.
func readMap(read func(int64, string) ([]byte, error), size, entrySize int64) ([]Extent, error) {
	var nums []int64
	var cur []byte
	want := int64(-1) // numbers of the map: 1 + 2*entries, known after the first
	for mapLen := int64(0); want < 0 || int64(len(nums)) < want; {
		if mapLen += tarBlock; mapLen > entrySize {
			return nil, fmt.Errorf("%w: the sparse map runs past the entry's %d bytes", ErrBadTar, entrySize)
		}
		blk, err := read(tarBlock, "sparse map")
		if err != nil {
			return nil, err
		}
		for _, c := range blk {
			if want >= 0 && int64(len(nums)) == want {
				break
			}
			switch {
			case c >= '0' && c <= '9' && len(cur) < 19:
				cur = append(cur, c)
			case c == '\n' && len(cur) > 0:
				v, _ := strconv.ParseInt(string(cur), 10, 64) // at most 19 digits: fits
				nums, cur = append(nums, v), cur[:0]
				if len(nums) == 1 {
					if v < 1 || v > entrySize/4 {
						return nil, fmt.Errorf("%w: sparse map of %d entries in an entry of %d bytes", ErrBadTar, v, entrySize)
					}
					want = 1 + 2*v
				}
			default:
				return nil, fmt.Errorf("%w: byte %q in the sparse map", ErrBadTar, c)
			}
		}
	}
	exts := make([]Extent, 0, len(nums)/2)
	for i := 1; i+1 < len(nums); i += 2 {
		exts = append(exts, Extent{nums[i], nums[i+1]})
	}
	if k := len(exts); k > 0 && exts[k-1] == (Extent{size, 0}) {
		exts = exts[:k-1] // the file ends in a hole
	}
	return exts, nil
}

// checkExtents checks that exts are what TarHeader takes: sorted, disjoint, not touching, not
// empty, inside the file, on 512-byte boundaries (an end may be the file's end).
func checkExtents(exts []Extent, size int64) error {
	var prev int64 = -1
	for _, x := range exts {
		switch {
		case x.Off < 0 || x.Len <= 0 || x.Off > size || x.Len > size-x.Off:
			return fmt.Errorf("extent [%d,+%d) is not a non-empty part of %d bytes", x.Off, x.Len, size)
		case x.Off <= prev:
			return fmt.Errorf("extent [%d,+%d) does not start after the previous one's end %d", x.Off, x.Len, prev)
		case x.Off%tarBlock != 0 || x.End()%tarBlock != 0 && x.End() != size:
			return fmt.Errorf("extent [%d,+%d) is not on 512-byte boundaries", x.Off, x.Len)
		}
		prev = x.End()
	}
	return nil
}

// parseOctal parses a ustar numeric field: octal digits, NUL- or space-terminated.
func parseOctal(b []byte) (int64, error) {
	s := strings.TrimRight(string(b), "\x00 ")
	if s == "" || len(s) > 11 {
		return 0, fmt.Errorf("numeric field %q", b)
	}
	return strconv.ParseInt(s, 8, 64)
}

// parsePax parses pax records ("LEN KEY=VALUE\n", LEN counting the whole record).
func parsePax(b []byte) (map[string]string, error) {
	recs := map[string]string{}
	for len(b) > 0 {
		sp := bytes.IndexByte(b, ' ')
		if sp <= 0 || sp > 6 {
			return nil, fmt.Errorf("%w: pax record without its length: %q", ErrBadTar, b[:min(len(b), 40)])
		}
		n, err := strconv.Atoi(string(b[:sp]))
		if err != nil || n <= sp+1 || n > len(b) || b[n-1] != '\n' {
			return nil, fmt.Errorf("%w: pax record of length %q in %d bytes", ErrBadTar, b[:sp], len(b))
		}
		k, v, ok := strings.Cut(string(b[sp+1:n-1]), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: pax record %q", ErrBadTar, b[:n])
		}
		if _, dup := recs[k]; dup {
			return nil, fmt.Errorf("%w: pax record %q repeated", ErrBadTar, k)
		}
		recs[k] = v
		b = b[n:]
	}
	return recs, nil
}
