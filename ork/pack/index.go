package pack

import (
	"fmt"
	"math"
	"strings"

	"orkpipe/ork/tile"
)

// Board is the plan summary stored in the index.
type Board struct {
	Name     string // board profile name, e.g. "rk3588"
	Profile  Digest // BLAKE3 of the profile's canonical JSON
	Domains  int    // IOMMU domains the plan uses
	Resident int64  // total resident bytes of all entries
}

// encodeIndex encodes the index of a pack of the current Version, with the residency section when res is
// not nil (checked against the entries by checkResidency).
func encodeIndex(b Board, entries []Entry, res *Residency) []byte {
	n := indexHeaderSize + len(b.Name)
	for _, e := range entries {
		n += 2 + len(e.Name) + recordFixed
	}
	var section []byte
	if res != nil {
		pos := make(map[string]int, len(entries))
		for i, e := range entries {
			pos[e.Name] = i
		}
		section = encodeResidency(res, pos)
	}
	buf := make([]byte, indexHeaderSize, n+len(section))
	copy(buf[0:4], indexMagic[:])
	le.PutUint32(buf[4:], uint32(len(entries)))
	le.PutUint32(buf[8:], uint32(b.Domains))
	le.PutUint16(buf[12:], uint16(len(b.Name)))
	copy(buf[16:48], b.Profile[:])
	le.PutUint64(buf[48:], uint64(b.Resident))
	le.PutUint32(buf[56:], uint32(len(section)))
	buf = append(buf, b.Name...)
	for _, e := range entries {
		buf = le.AppendUint16(buf, uint16(len(e.Name)))
		buf = append(buf, e.Name...)
		r := make([]byte, recordFixed)
		r[0] = byte(e.DType)
		r[1] = byte(e.Nibbles)
		r[2] = byte(e.Rotation.Kind)
		r[3] = byte(e.ActBits)
		r[4] = byte(e.ScaleLayout())
		le.PutUint32(r[8:], uint32(e.K))
		le.PutUint32(r[12:], uint32(e.N))
		le.PutUint32(r[16:], uint32(e.Kp))
		le.PutUint32(r[20:], uint32(e.Np))
		le.PutUint32(r[24:], uint32(e.Segments))
		le.PutUint32(r[28:], uint32(e.SegmentK))
		le.PutUint32(r[32:], uint32(e.Group))
		le.PutUint32(r[36:], uint32(e.Rotation.Block))
		le.PutUint64(r[40:], e.Rotation.Seed)
		le.PutUint64(r[48:], uint64(e.Offset))
		le.PutUint64(r[56:], uint64(e.Length))
		le.PutUint64(r[64:], uint64(e.CodesLength))
		le.PutUint64(r[72:], uint64(e.ScalesOffset))
		le.PutUint64(r[80:], uint64(e.ScalesLength))
		le.PutUint64(r[88:], uint64(e.ResidentBytes))
		le.PutUint32(r[96:], uint32(e.Domain))
		le.PutUint32(r[100:], math.Float32bits(e.ActClip))
		le.PutUint64(r[104:], math.Float64bits(e.QErr))
		copy(r[112:144], e.Digest[:])
		copy(r[144:176], e.Source[:])
		buf = append(buf, r...)
	}
	return append(buf, section...)
}

// decodeIndex parses and fully validates the index of a pack of the given (supported) format version: every
// derived field is recomputed and compared, entries must be contiguous from the first page to indexOffset
// (which the trailer check keeps inside the file), each ending at or before it, names unique, the plan
// consistent, every running sum within int64; a version-3 index may end in a residency section (nil when
// absent).
func decodeIndex(b []byte, count uint32, indexOffset int64, version uint32) (Board, []Entry, *Residency, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrIndex, fmt.Sprintf(format, a...))
	}
	if len(b) < indexHeaderSize {
		return Board{}, nil, nil, bad("%d bytes, less than the %d-byte index header", len(b), indexHeaderSize)
	}
	if [4]byte(b[0:4]) != indexMagic {
		return Board{}, nil, nil, bad("magic %q, want %q", b[0:4], indexMagic[:])
	}
	if c := le.Uint32(b[4:]); c != count {
		return Board{}, nil, nil, bad("entry count %d, header says %d", c, count)
	}
	if uint64(count) > uint64(len(b))/(2+1+recordFixed) {
		return Board{}, nil, nil, bad("entry count %d cannot fit in %d bytes", count, len(b))
	}
	var board Board
	board.Domains = int(le.Uint32(b[8:]))
	nameLen := int(le.Uint16(b[12:]))
	var section int // residency section length (version 3; bytes 56..59 were reserved before)
	if version >= 3 {
		section = int(le.Uint32(b[56:]))
	}
	if r := le.Uint16(b[14:]); r != 0 || le.Uint32(b[60:]) != 0 || version < 3 && le.Uint32(b[56:]) != 0 {
		return Board{}, nil, nil, bad("reserved header fields are not zero")
	}
	if section > len(b)-indexHeaderSize {
		return Board{}, nil, nil, bad("residency section of %d bytes does not fit the %d-byte index", section, len(b))
	}
	sb := b[len(b)-section:]
	b = b[:len(b)-section]
	board.Profile = Digest(b[16:48])
	if rb := le.Uint64(b[48:]); rb > math.MaxInt64 {
		return Board{}, nil, nil, bad("total resident bytes %d: want less than 2^63", rb)
	}
	board.Resident = int64(le.Uint64(b[48:]))
	if nameLen < 1 || nameLen > 255 || indexHeaderSize+nameLen > len(b) {
		return Board{}, nil, nil, bad("board name length %d: want 1..255 within the index", nameLen)
	}
	board.Name = string(b[indexHeaderSize : indexHeaderSize+nameLen])
	for _, c := range []byte(board.Name) {
		if c < 0x21 || c > 0x7e {
			return Board{}, nil, nil, bad("board name %q: want printable ASCII", board.Name)
		}
	}
	p := indexHeaderSize + nameLen
	entries := make([]Entry, 0, count)
	seen := make(map[string]bool, count)
	next := int64(HeaderSize)
	var resident int64
	for i := 0; i < int(count); i++ {
		if p+2 > len(b) {
			return Board{}, nil, nil, bad("record %d: index ends at byte %d", i, len(b))
		}
		l := int(le.Uint16(b[p:]))
		p += 2
		if l < 1 || l > MaxNameLen || p+l+recordFixed > len(b) {
			return Board{}, nil, nil, bad("record %d: name length %d does not fit (want 1..%d)", i, l, MaxNameLen)
		}
		name := string(b[p : p+l])
		p += l
		r := b[p : p+recordFixed]
		p += recordFixed
		e, err := decodeRecord(name, r, version)
		if err != nil {
			return Board{}, nil, nil, fmt.Errorf("%w: record %d: %w", ErrIndex, i, err)
		}
		if seen[name] {
			return Board{}, nil, nil, bad("entry %q appears twice", name)
		}
		seen[name] = true
		if off := le.Uint64(r[48:]); off != uint64(next) {
			return Board{}, nil, nil, bad("entry %q at offset %d, want %d (entries are contiguous)", name, off, next)
		}
		if e.Length > indexOffset-next { // next <= indexOffset: no overflow
			return Board{}, nil, nil, bad("entry %q at offset %d, %d bytes long, ends at %d, past the index offset %d (entries end where the index starts)",
				name, next, e.Length, uint64(next)+uint64(e.Length), indexOffset)
		}
		next += e.Length
		if e.Domain >= board.Domains {
			return Board{}, nil, nil, bad("entry %q in domain %d, plan has %d domains", name, e.Domain, board.Domains)
		}
		sum, ok := addSize(resident, e.ResidentBytes)
		if !ok {
			return Board{}, nil, nil, bad("entry %q: resident bytes %d take the entries' sum (%d before it) past %d", name, e.ResidentBytes, resident, int64(math.MaxInt64))
		}
		resident = sum
		entries = append(entries, e)
	}
	if p != len(b) {
		return Board{}, nil, nil, bad("%d bytes after the last record", len(b)-p)
	}
	if next != indexOffset {
		return Board{}, nil, nil, bad("entries end at %d but the index starts at %d", next, indexOffset)
	}
	if resident != board.Resident {
		return Board{}, nil, nil, bad("entries' resident bytes sum to %d, index total says %d", resident, board.Resident)
	}
	if section == 0 {
		return board, entries, nil, nil
	}
	res, err := decodeResidency(sb, entries)
	if err != nil {
		return Board{}, nil, nil, err
	}
	return board, entries, res, nil
}

// decodeRecord decodes one entry record of a pack of the given format version. The fields a version added
// are read only from packs of that version or later; older packs get the defaults docs/orkpack.md 1.3 gives.
func decodeRecord(name string, r []byte, version uint32) (Entry, error) {
	if r[5] != 0 || r[6] != 0 || r[7] != 0 {
		return Entry{}, fmt.Errorf("entry %q: reserved bytes are not zero", name)
	}
	clip := float32(1) // version 1: bytes 100..103 are reserved, the entry runs unclipped
	if version >= 2 {
		clip = math.Float32frombits(le.Uint32(r[100:]))
		if clip == 0 {
			return Entry{}, fmt.Errorf("entry %q: activation clip 0: want a ratio in (0, 1]", name)
		}
	} else if le.Uint32(r[100:]) != 0 {
		return Entry{}, fmt.Errorf("entry %q: reserved bytes are not zero (version 1 has no activation clip)", name)
	}
	m := Meta{
		Name:     name,
		DType:    DType(r[0]),
		Nibbles:  tile.NibbleOrder(r[1]),
		Rotation: Rotation{Kind: RotationKind(r[2]), Block: int(le.Uint32(r[36:])), Seed: le.Uint64(r[40:])},
		ActBits:  int(r[3]),
		ActClip:  clip,
		K:        int(le.Uint32(r[8:])),
		N:        int(le.Uint32(r[12:])),
		Group:    int(le.Uint32(r[32:])),
		QErr:     math.Float64frombits(le.Uint64(r[104:])),
		Source:   Digest(r[144:176]),
	}
	if m.ActBits == 0 {
		return Entry{}, fmt.Errorf("entry %q: activation bits 0", name)
	}
	segK := int(le.Uint32(r[28:]))
	if m.DType.Kind() != tile.I4Compact && (segK == 0 || segK%32 != 0) {
		return Entry{}, fmt.Errorf("entry %q: segment K %d: want a positive multiple of 32", name, segK)
	}
	want, err := geometry(m, segK)
	if err != nil {
		return Entry{}, err
	}
	if err := m.checkRotatedK(); err != nil {
		return Entry{}, err
	}
	if ScaleLayout(r[4]) != m.ScaleLayout() {
		return Entry{}, fmt.Errorf("entry %q: scale layout %d, want %d for %s", name, r[4], m.ScaleLayout(), m.DType)
	}
	var diff []string // the stored fields that differ from the computed ones, as stored
	for _, f := range []struct {
		name         string
		stored, want uint64
	}{
		{"Kp", uint64(le.Uint32(r[16:])), uint64(want.Kp)},
		{"Np", uint64(le.Uint32(r[20:])), uint64(want.Np)},
		{"segments", uint64(le.Uint32(r[24:])), uint64(want.Segments)},
		{"segment K", uint64(segK), uint64(want.SegmentK)},
		{"codes length", le.Uint64(r[64:]), uint64(want.CodesLength)},
		{"scales offset", le.Uint64(r[72:]), uint64(want.ScalesOffset)},
		{"scales length", le.Uint64(r[80:]), uint64(want.ScalesLength)},
		{"length", le.Uint64(r[56:]), uint64(want.Length)},
	} {
		if f.stored != f.want {
			diff = append(diff, fmt.Sprintf("%s %d (computed %d)", f.name, f.stored, f.want))
		}
	}
	if len(diff) > 0 {
		return Entry{}, fmt.Errorf("entry %q (%s K=%d N=%d G=%d): stored geometry differs from the computed one: %s",
			name, m.DType, m.K, m.N, m.Group, strings.Join(diff, ", "))
	}
	got := want
	got.Offset = int64(le.Uint64(r[48:])) // decodeIndex checks it against the previous entry's end
	got.Digest = Digest(r[112:144])
	rb, d := le.Uint64(r[88:]), le.Uint32(r[96:])
	if rb > math.MaxInt64 {
		return Entry{}, fmt.Errorf("entry %q: resident bytes %d: want less than 2^63", name, rb)
	}
	if uint64(d) > math.MaxInt {
		return Entry{}, fmt.Errorf("entry %q: domain %d: more than this platform's int", name, d)
	}
	got.ResidentBytes, got.Domain = int64(rb), int(d)
	return got, nil
}

// addSize returns a+b for sizes a, b >= 0; ok is false when the sum would pass math.MaxInt64. Every
// running sum of sizes the reader and writer keep goes through it.
func addSize(a, b int64) (sum int64, ok bool) {
	if b > math.MaxInt64-a {
		return 0, false
	}
	return a + b, true
}
