package board

import (
	"fmt"

	"orkpipe/ork/pack"
	"orkpipe/ork/tile"
)

// ResidentBytes is THE authority for what an entry occupies on the board (docs/orkpack.md section 4): the
// native layout of its resident width (segmented at the profile's max K, page-padded per segment), plus a
// full-K companion buffer when the profile's companion rule applies. It depends only on the entry's dtype,
// K and N, never on how the entry is stored on disk (I4 and I4_ROT_A8 are int4 on disk, int8 resident).
// Scales are not NPU-resident.
func ResidentBytes(e pack.Entry, p Profile) (int64, error) {
	w, ok := p.Resident[e.DType.String()]
	if !ok {
		return 0, fmt.Errorf("%w %q: no resident width for dtype %s (entry %q)", ErrProfile, p.Name, e.DType, e.Name)
	}
	kind, err := w.kind()
	if err != nil {
		return 0, fmt.Errorf("%w %q: %v", ErrProfile, p.Name, err)
	}
	l, err := tile.New(kind, e.K, e.N, tile.WithSegmentK(p.MaxSegmentK), tile.WithPageSize(p.PageSize))
	if err != nil {
		return 0, fmt.Errorf("entry %q: %w", e.Name, err)
	}
	total := int64(l.Size())
	if p.companion(w, e.K) {
		full, err := tile.New(kind, e.K, e.N, tile.WithSegmentK(l.Kp()), tile.WithPageSize(p.PageSize))
		if err != nil {
			return 0, fmt.Errorf("entry %q: companion: %w", e.Name, err)
		}
		total += int64(full.Size())
	}
	return total, nil
}

func (w Width) kind() (tile.Kind, error) {
	switch w {
	case Int4:
		return tile.I4Native, nil
	case Int8:
		return tile.I8Native, nil
	case FP16:
		return tile.F16Native, nil
	}
	return 0, fmt.Errorf("width %q: want int4, int8 or fp16", w)
}
