package registry

import (
	"bytes"
	"fmt"
	"io"
	"math/bits"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"orkpipe/artifacts"
	"orkpipe/artifacts/sparse"
)

// Form is how a layer carries its file: the last part of its ModelPack media type.
type Form string

const (
	// FormRaw: the layer is the file's bytes (holes included, as zeros).
	FormRaw Form = "raw"
	// FormTar: the layer is a tar archive of the file (package artifacts/sparse); a file with holes is a GNU
	// sparse entry, so only its data travels.
	FormTar Form = "tar"
	// FormTarZstd: the layer is that archive compressed with zstd, one frame per range.
	FormTarZstd Form = "tar+zstd"
)

// titleSuffix is what the layer's org.opencontainers.image.title adds to the file name: a client
// that writes layers to files by title (oras pull) writes a raw layer as the file itself and an
// archive under a name that says what it is.
func (f Form) titleSuffix() string {
	switch f {
	case FormTar:
		return ".tar"
	case FormTarZstd:
		return ".tar.zst"
	}
	return ""
}

// Range is one verification range of a file: file bytes [Off, Off+Len), carried by blob bytes
// Stored (for a raw layer the same offsets; for a tar form the range's part of the archive, a
// zstd frame for tar+zstd; Stored.Len is 0 for a range of a tar form that holds no data and
// neither the archive's header nor its trailer). CV is the BLAKE3 chaining value of the range's
// file bytes when the file has more than one range; a one-range file is checked by its BLAKE3.
type Range struct {
	Off, Len int64
	Stored   Extent
	CV       artifacts.ChainValue
}

// File is one file of an artifact: one layer.
type File struct {
	Name    string
	Class   string // ClassWeight or ClassDoc
	Form    Form
	Digests FileDigests
	// Extents are the file's data extents, sorted and disjoint: the whole file ([{0, size}]) when it
	// has no holes, nothing for an empty file.
	Extents []Extent
	// RangeSize is the bytes per range (a power of two, at least artifacts.PieceSize) when the file
	// has more than one range, else 0.
	RangeSize int64
	Ranges    []Range
	Layer     v1.Descriptor
	DiffID    string // sha256 of the uncompressed layer (the ModelPack config's diffId)
	// Extra holds the dev.orkpipe.* layer annotations that are not part of the layout (e.g. pack version).
	Extra map[string]string
}

// MediaType returns the file's ModelPack layer media type.
func (f File) MediaType() string { return mediaTypePrefix + f.Class + ".v1." + string(f.Form) }

// Title returns the layer's org.opencontainers.image.title.
func (f File) Title() string { return f.Name + f.Form.titleSuffix() }

// DataSize is the number of file bytes outside holes.
func (f File) DataSize() int64 { return sparse.Len(f.Extents) }

// StoredSize is the number of bytes the layer occupies in the registry.
func (f File) StoredSize() int64 { return f.Layer.Size }

// fullExtents is the data of a file without holes.
func fullExtents(size int64) []Extent {
	if size == 0 {
		return nil
	}
	return []Extent{{Off: 0, Len: size}}
}

// ValidRangeSize reports whether n can be a range size: a power of two of whole BLAKE3 pieces, so
// that every range is a complete subtree of the file's BLAKE3 tree.
func ValidRangeSize(n int64) bool {
	return n >= artifacts.PieceSize && bits.OnesCount64(uint64(n)) == 1
}

// rangesOf returns the ranges of a file of size bytes cut every rangeSize bytes (one range when
// the file is no longer than that), their file offsets only.
func rangesOf(size, rangeSize int64) []Range {
	if size <= rangeSize {
		return []Range{{Off: 0, Len: size}}
	}
	var out []Range
	for off := int64(0); off < size; off += rangeSize {
		out = append(out, Range{Off: off, Len: min(rangeSize, size-off)})
	}
	return out
}

// clip returns the parts of exts (sorted, disjoint) inside [off, off+n). It finds the first one by
// binary search and reads only those that overlap, so that clipping every range of a file costs
// the file's extents once, not once per range (ParseManifest took 6.7 s of CPU for 24k ranges and
// 140k extents, minutes for a 20 MiB manifest).
func clip(exts []Extent, off, n int64) []Extent {
	var out []Extent
	i := sort.Search(len(exts), func(i int) bool { return exts[i].End() > off })
	for _, e := range exts[i:] {
		if e.Off >= off+n {
			break
		}
		lo, hi := max(e.Off, off), min(e.End(), off+n)
		if lo < hi {
			out = append(out, Extent{Off: lo, Len: hi - lo})
		}
	}
	return out
}

// segment is what range k of a tar form holds before compression: the archive's header (first
// range), the data of the file's extents inside the range, and the archive's trailer (last range).
type segment struct {
	head []byte
	data []Extent
	tail []byte
}

func (s segment) len() int64 { return int64(len(s.head)) + sparse.Len(s.data) + int64(len(s.tail)) }

// segments cuts the tar form of f into its ranges' segments.
func (f File) segments() []segment {
	out := make([]segment, len(f.Ranges))
	for k, r := range f.Ranges {
		out[k].data = clip(f.Extents, r.Off, r.Len)
	}
	out[0].head = sparse.TarHeader(f.Name, f.Digests.Size, f.Extents)
	out[len(out)-1].tail = sparse.TarTrailer(f.DataSize())
	return out
}

// reader returns the segment's bytes, its data read from file.
func (s segment) reader(file io.ReaderAt) io.Reader {
	return io.MultiReader(bytes.NewReader(s.head), sparse.NewExtentsReader(file, s.data), bytes.NewReader(s.tail))
}

// checkRanges validates f's ranges against its size, form and layer: range geometry, stored
// extents contiguous from the start of the blob and covering it exactly.
func (f File) checkRanges() error {
	want := []Range{{Off: 0, Len: f.Digests.Size}}
	if f.RangeSize != 0 {
		want = rangesOf(f.Digests.Size, f.RangeSize)
	}
	if len(f.Ranges) != len(want) {
		return fmt.Errorf("%d ranges, want %d", len(f.Ranges), len(want))
	}
	var next int64
	for k, r := range f.Ranges {
		if r.Off != want[k].Off || r.Len != want[k].Len {
			return fmt.Errorf("range %d is [%d,+%d), want [%d,+%d)", k, r.Off, r.Len, want[k].Off, want[k].Len)
		}
		if r.Stored.Off != next || r.Stored.Len < 0 {
			return fmt.Errorf("range %d is stored at [%d,+%d), want it at %d", k, r.Stored.Off, r.Stored.Len, next)
		}
		if f.Form == FormRaw && r.Stored != (Extent{Off: r.Off, Len: r.Len}) {
			return fmt.Errorf("range %d of a raw layer is stored at [%d,+%d), not at its file offset", k, r.Stored.Off, r.Stored.Len)
		}
		next = r.Stored.End()
	}
	if next != f.Layer.Size {
		return fmt.Errorf("ranges are stored in %d bytes, the layer has %d", next, f.Layer.Size)
	}
	if f.Form != FormRaw {
		segs := f.segments()
		for k, r := range f.Ranges {
			if r.Stored.Len == 0 && segs[k].len() != 0 {
				return fmt.Errorf("range %d stores nothing but holds %d bytes of the archive", k, segs[k].len())
			}
			if f.Form == FormTar && r.Stored.Len != segs[k].len() {
				return fmt.Errorf("range %d is stored in %d bytes, its part of the archive is %d", k, r.Stored.Len, segs[k].len())
			}
		}
	}
	return nil
}
