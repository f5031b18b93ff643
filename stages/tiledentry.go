package stages

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"

	"orkpipe/ork/pack"
)

// Tiled-entry file ("entry" output of tile), little-endian:
//
//	offset  size        field
//	0       8           magic "ORKTE\x00\x00\x01"
//	8       8           u64 meta_len
//	16      meta_len    meta: JSON of QWeightMeta (the finalized weight's)
//	...     8           u64 nibble order (tile.NibbleOrder)
//	...     8           u64 scales_len
//	...     scales_len  float32 scales, row-major [N][G]
//	...     8           u64 codes_len
//	...     codes_len   the codes in the dtype's native (or compact) layout, as pack.TileWeight lays them out
//
// The file is stored in the CAS (its digest is checked there); readers check every length against
// the file size and against the geometry the meta implies.

var entryMagic = [8]byte{'O', 'R', 'K', 'T', 'E', 0, 0, 1}

// tiledEntry is an opened tiled-entry file: its meta and where its parts are.
type tiledEntry struct {
	Meta         QWeightMeta
	Nibbles      uint64
	Scales       []float32
	ScalesOff    int64 // the scales' bytes (little-endian float32, N·groups of them) start here
	CodesOff     int64
	CodesLen     int64
	OnDiskLength int64 // the entry's page-padded length in a pack
}

func openTiledEntry(f *os.File, path string, withScales bool) (*tiledEntry, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	var hdr [16]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil || !bytes.Equal(hdr[:8], entryMagic[:]) {
		return nil, fmt.Errorf("%w: %s: not a tiled entry (bad magic or short header)", ErrWeightFile, path)
	}
	ml := int64(binary.LittleEndian.Uint64(hdr[8:]))
	if ml <= 0 || ml > 1<<20 || 16+ml+16 > size {
		return nil, fmt.Errorf("%w: %s: meta length %d in %d bytes", ErrWeightFile, path, ml, size)
	}
	meta := make([]byte, ml+16)
	if _, err := f.ReadAt(meta, 16); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrWeightFile, path, err)
	}
	te := &tiledEntry{}
	dec := json.NewDecoder(bytes.NewReader(meta[:ml]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&te.Meta); err != nil {
		return nil, fmt.Errorf("%w: %s: meta: %v", ErrWeightFile, path, err)
	}
	if err := te.Meta.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	te.Nibbles = binary.LittleEndian.Uint64(meta[ml:])
	sl := int64(binary.LittleEndian.Uint64(meta[ml+8:]))
	if sl != int64(te.Meta.N)*int64(te.Meta.Groups())*4 || 16+ml+16+sl+8 > size {
		return nil, fmt.Errorf("%w: %s: scales length %d, want %d", ErrWeightFile, path, sl, int64(te.Meta.N)*int64(te.Meta.Groups())*4)
	}
	off := 16 + ml + 16
	te.ScalesOff = off
	if withScales {
		raw := make([]byte, sl)
		if _, err := f.ReadAt(raw, off); err != nil {
			return nil, fmt.Errorf("%w: %s: scales: %v", ErrWeightFile, path, err)
		}
		te.Scales = make([]float32, sl/4)
		for i := range te.Scales {
			te.Scales[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	}
	off += sl
	var cl [8]byte
	if _, err := f.ReadAt(cl[:], off); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrWeightFile, path, err)
	}
	te.CodesLen = int64(binary.LittleEndian.Uint64(cl[:]))
	te.CodesOff = off + 8
	if te.CodesOff+te.CodesLen != size {
		return nil, fmt.Errorf("%w: %s: codes length %d, file has %d bytes after the scales", ErrWeightFile, path, te.CodesLen, size-te.CodesOff)
	}
	pm, err := te.Meta.PackMeta()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrWeightFile, path, err)
	}
	pm.Nibbles = nibbleOrder(te.Nibbles)
	g, err := pack.Geometry(pm, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if g.CodesLength != te.CodesLen {
		return nil, fmt.Errorf("%w: %s: codes length %d, the geometry of %s needs %d", ErrWeightFile, path, te.CodesLen, pm.Name, g.CodesLength)
	}
	te.OnDiskLength = g.Length
	return te, nil
}
