package registry

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
)

// The tar form of a layer is a POSIX tar archive (pax format) holding one regular file, written by
// hand because Go's archive/tar writer drops the GNU.sparse records a sparse entry needs (its
// reader handles them). Everything but the data is a function of the file's name, size and data
// extents, so push and pull produce it alike and pull compares the bytes it receives with it:
//
//	header   a pax extended header ('x' entry): path=NAME for a file without holes; for a file
//	         with holes the GNU sparse 1.0 records GNU.sparse.major=1, GNU.sparse.minor=0,
//	         GNU.sparse.name=NAME and GNU.sparse.realsize=SIZE (never path: a reader that does not
//	         know the sparse format then extracts "GNUSparseFile.0/NAME" with the map inside, not a
//	         wrong NAME); size=N when the entry's data is 8 GiB or more
//	         a ustar header: the file, type '0', mode 0444, uid and gid 0, no owner names, mtime 0
//	         (the epoch: constant, as ModelPack's reproducibility guidance asks)
//	         for a sparse file, the sparse map as the first blocks of the entry's data: the number
//	         of entries, then each entry's offset and length, decimal, one per line, padded to 512;
//	         the entries are the data extents, and, when the file ends in a hole, a last entry of
//	         length 0 at the file's size (GNU tar sets the size of the file it extracts from it)
//	data     the bytes of the file's data extents, in order, concatenated (a file without holes:
//	         the whole file). Every extent but one ending at the file's end starts and ends on a
//	         multiple of 512 (push rounds them, see alignExtents): GNU tar reads each extent's data in
//	         whole blocks, archive/tar reads them back to back, and both then agree
//	trailer  zeros to the next multiple of 512, then the two zero blocks that end an archive
//
// A spec-following client (archive/tar, GNU tar, bsdtar) extracts NAME with the right bytes (holes
// as zeros, or as holes where it can); orkpipe's pull writes the data extents into a sparse file.

const (
	tarBlock    = 512
	tarMode     = 0o444
	ustarMaxLen = 1<<33 - 1 // the largest size an 11-digit octal field holds
)

// sparseName is the ustar name of a sparse file's entry (GNU tar's convention, %d/GNUSparseFile.%p/%f).
func sparseName(name string) string { return "GNUSparseFile.0/" + name }

// tarHeader returns the header of the tar form of a file of size bytes whose data is exts (the
// whole file when it has no holes): everything before its data.
func tarHeader(name string, size int64, exts []Extent) []byte {
	sparse := hasHoles(size, exts)
	dataLen := extentsLen(exts)
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

// tarTrailer returns the bytes after the data of a tar form whose data is dataLen bytes.
func tarTrailer(dataLen int64) []byte { return make([]byte, pad(dataLen)+2*tarBlock) }

// alignExtents rounds data extents out to multiples of tarBlock (an extent's end no further than
// size), merging those that then touch: the extents of the tar form (see above). Extents from
// SEEK_DATA/SEEK_HOLE are already aligned to filesystem blocks, so this changes nothing there.
func alignExtents(exts []Extent, size int64) []Extent {
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

// pad is the number of zero bytes that bring n to a multiple of 512.
func pad(n int64) int64 { return (tarBlock - n%tarBlock) % tarBlock }

// hasHoles reports whether a file of size bytes with data exts has any byte outside them.
func hasHoles(size int64, exts []Extent) bool { return extentsLen(exts) != size }

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
	octal(h[100:108], tarMode)
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
