package sparse

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
)

const (
	tarBlock    = 512
	ustarMaxLen = 1<<33 - 1 // the largest size an 11-digit octal field holds
	// TarMode is the mode of the file in the tar form.
	TarMode = 0o444
)

// sparseName is the ustar name of a sparse file's entry (GNU tar's convention, %d/GNUSparseFile.%p/%f).
func sparseName(name string) string { return "GNUSparseFile.0/" + name }

// TarHeader returns the header of the tar form of a file of size bytes whose data is exts (sorted,
// disjoint, aligned as Align leaves them; the whole file when it has no holes): everything before
// its data.
func TarHeader(name string, size int64, exts []Extent) []byte {
	sparse := HasHoles(size, exts)
	dataLen := Len(exts)
	var mp []byte
	records := map[string]string{}
	ustar := name
	if sparse {
		mp = sparseMap(size, exts)
		records["GNU.sparse.major"] = "1"
		records["GNU.sparse.minor"] = "0"
		records["GNU.sparse.name"] = name
		records["GNU.sparse.realsize"] = strconv.FormatInt(size, 10)
		ustar = sparseName(name)
	} else {
		records["path"] = name
	}
	entry := int64(len(mp)) + dataLen
	if entry > ustarMaxLen {
		records["size"] = strconv.FormatInt(entry, 10)
	}
	var b bytes.Buffer
	pax := paxRecords(records)
	b.Write(ustarBlock("PaxHeaders.0/"+name, 'x', int64(len(pax))))
	b.Write(pax)
	b.Write(make([]byte, pad(int64(len(pax)))))
	if entry > ustarMaxLen {
		entry = 0 // too large for the field: the pax record "size" says it (as Go's archive/tar writes it)
	}
	b.Write(ustarBlock(ustar, '0', entry))
	b.Write(mp)
	return b.Bytes()
}

// TarTrailer returns the bytes after the data of a tar form whose data is dataLen bytes.
func TarTrailer(dataLen int64) []byte { return make([]byte, pad(dataLen)+2*tarBlock) }

// WriteTar writes the tar form of src (size bytes, data exts as TarHeader wants them) named name to
// dst and returns the bytes written. The data is copied extent by extent from src's offsets (by
// the kernel, copy_file_range, where dst is a file on the same filesystem). It fails if src is
// shorter than its last extent's end.
func WriteTar(ctx context.Context, dst io.Writer, src *os.File, name string, size int64, exts []Extent) (int64, error) {
	var n int64
	write := func(b []byte) error {
		k, err := dst.Write(b)
		n += int64(k)
		return err
	}
	if err := write(TarHeader(name, size, exts)); err != nil {
		return n, err
	}
	for _, e := range exts {
		if _, err := src.Seek(e.Off, io.SeekStart); err != nil {
			return n, fmt.Errorf("%s: seek to %d: %w", src.Name(), e.Off, err)
		}
		for left := e.Len; left > 0; {
			if err := ctx.Err(); err != nil {
				return n, err
			}
			k, err := io.CopyN(dst, src, min(left, copyChunk))
			n += k
			if err == io.EOF {
				return n, fmt.Errorf("%s: ended before %d bytes (changed meanwhile?)", src.Name(), e.End())
			}
			if err != nil {
				return n, err
			}
			left -= k
		}
	}
	return n, write(TarTrailer(Len(exts)))
}

// copyChunk bounds one copy between cancellation checks.
const copyChunk = 64 << 20

// pad is the number of zero bytes that bring n to a multiple of 512.
func pad(n int64) int64 { return (tarBlock - n%tarBlock) % tarBlock }

// sparseMap is the GNU sparse 1.0 map of a file of size bytes with data exts, padded to a whole
// number of blocks.
func sparseMap(size int64, exts []Extent) []byte {
	entries := exts
	if n := len(exts); n == 0 || exts[n-1].End() < size {
		entries = append(exts[:n:n], Extent{size, 0}) // the file ends in a hole
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d\n", len(entries))
	for _, e := range entries {
		fmt.Fprintf(&b, "%d\n%d\n", e.Off, e.Len)
	}
	b.Write(make([]byte, pad(int64(b.Len()))))
	return b.Bytes()
}

// paxRecords encodes records as a pax extended header's data, keys sorted: each record is
// "LEN KEY=VALUE\n", LEN counting the whole record including its own digits.
func paxRecords(records map[string]string) []byte {
	keys := make([]string, 0, len(records))
	for k := range records {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for _, k := range keys {
		rest := " " + k + "=" + records[k] + "\n"
		n := len(rest)
		for n < len(rest)+len(strconv.Itoa(n)) {
			n = len(rest) + len(strconv.Itoa(n))
		}
		b.WriteString(strconv.Itoa(n) + rest)
	}
	return b.Bytes()
}

// ustarBlock returns a ustar header block for an entry of type typ and size bytes of data. A name
// longer than 100 bytes is cut: the pax records carry the real one.
func ustarBlock(name string, typ byte, size int64) []byte {
	h := make([]byte, tarBlock)
	copy(h[0:100], name)
	octal(h[100:108], TarMode)
	octal(h[108:116], 0)
	octal(h[116:124], 0)
	octal(h[124:136], size)
	octal(h[136:148], 0)
	h[156] = typ
	copy(h[257:263], "ustar\x00")
	copy(h[263:265], "00")
	octal(h[329:337], 0)
	octal(h[337:345], 0)
	copy(h[148:156], "        ") // the checksum is computed with its own field as spaces
	var sum int64
	for _, c := range h {
		sum += int64(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return h
}

// octal writes v as zero-padded octal digits followed by a NUL, filling field.
func octal(field []byte, v int64) {
	s := strconv.FormatInt(v, 8)
	n := len(field) - 1
	for i := range n {
		field[i] = '0'
	}
	copy(field[n-len(s):n], s)
	field[n] = 0
}
