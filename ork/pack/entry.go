package pack

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"orkpipe/ork/tile"
)

// MaxNameLen is the longest entry name accepted.
const MaxNameLen = 1024

// groupSizes are the scale group sizes an entry may have (docs/orkpack.md 3): 0 (per channel) and the
// sizes the quantizer makes and the emulation computes.
var groupSizes = []int{0, 32, 64, 128, 256, 512}

// Meta is what a caller says about one weight: everything in the index that is not derived.
type Meta struct {
	Name     string           // tensor name; an expert slice is "<name>#<e>"
	DType    DType            //
	K, N     int              // input features, output channels (GGUF ne[0], ne[1])
	Group    int              // scale group size along K: 0 = per channel, or one of Groups
	Nibbles  tile.NibbleOrder // int4 nibble order (LowFirst for other dtypes)
	Rotation Rotation         //
	ActBits  int              // activation bits the weight expects; 0 = the dtype's default
	// ActClip is the activation clip ratio in (0, 1]: the board quantizes each activation row with the
	// scale ActClip·amax/qmax (docs/orkpack.md 2.4); 0 = 1 (no clipping). F16 entries take 1.
	ActClip float32
	QErr    float64 // relative quantization error, finite and >= 0
	Source  Digest  // BLAKE3 of the source tensor bytes
}

// Entry is one index record: the caller's Meta plus the geometry, location, hash and placement.
type Entry struct {
	Meta
	SegmentK      int // max padded K per segment (0 for the compact layout)
	Kp, Np        int
	Segments      int
	Offset        int64 // of the entry data in the file
	Length        int64 // of the entry data, page padded
	CodesLength   int64
	ScalesOffset  int64 // relative to Offset
	ScalesLength  int64 // unpadded
	ResidentBytes int64 // on the board, from the plan (board.ResidentBytes)
	Domain        int   // IOMMU domain, from the plan
	Digest        Digest
}

// Groups returns the number of scale groups per row (0 for dtypes without scales).
func (m Meta) Groups() int {
	switch {
	case !m.DType.HasScales():
		return 0
	case m.Group == 0:
		return 1
	}
	return (m.K + m.Group - 1) / m.Group
}

// ScaleLayout returns how the entry stores its scales.
func (m Meta) ScaleLayout() ScaleLayout {
	if m.DType.HasScales() {
		return ScalesF32RowNG
	}
	return ScalesNone
}

// Validate checks the caller's fields and fills defaults (ActBits); the error wraps ErrInput and names the
// entry and the field.
func (m *Meta) Validate() error {
	if err := m.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInput, err)
	}
	return nil
}

// validate is Validate without the writer's sentinel: the reader checks every record with it and wraps
// what it finds as ErrIndex.
func (m *Meta) validate() error {
	if err := validateName(m.Name); err != nil {
		return err
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("entry %q: %s", m.Name, fmt.Sprintf(format, a...))
	}
	if !m.DType.Valid() {
		return bad("dtype %d: want one of I4_NATIVE, I4, I8, I8_ROT, I4_ROT_A8, F16", uint8(m.DType))
	}
	if m.K < 1 || m.N < 1 || m.K > tile.MaxDim || m.N > tile.MaxDim {
		return bad("shape K=%d N=%d: each must be in [1, %d]", m.K, m.N, tile.MaxDim)
	}
	switch {
	case m.DType == F16 && m.Group != 0:
		return bad("group %d: F16 has no scales, want 0", m.Group)
	case !slices.Contains(groupSizes, m.Group):
		return bad("group %d: want 0 (per channel), 32, 64, 128, 256 or 512", m.Group)
	}
	if m.Nibbles != tile.LowFirst && (!m.DType.Int4() || m.Nibbles != tile.HighFirst) {
		return bad("nibble order %d: want 0 (low first)%s", m.Nibbles, map[bool]string{true: " or 1 (high first)"}[m.DType.Int4()])
	}
	if err := m.Rotation.validate(); err != nil {
		return bad("%v", err)
	}
	if m.DType.RotationRequired() && m.Rotation.Kind == RotNone {
		return bad("dtype %s requires a rotation, got none", m.DType)
	}
	if m.DType == F16 && m.Rotation.Kind != RotNone {
		return bad("dtype F16 takes no rotation, got %s", m.Rotation)
	}
	if m.ActBits == 0 {
		m.ActBits = m.DType.DefaultActBits()
	}
	if !m.DType.actBitsOK(m.ActBits) {
		return bad("activation bits %d not valid for %s", m.ActBits, m.DType)
	}
	if m.ActClip == 0 {
		m.ActClip = 1
	}
	if !(m.ActClip > 0 && m.ActClip <= 1) {
		return bad("activation clip %v: want a ratio in (0, 1]", m.ActClip)
	}
	if m.DType == F16 && m.ActClip != 1 {
		return bad("activation clip %v: F16 activations are not quantized, want 1", m.ActClip)
	}
	if math.IsNaN(m.QErr) || math.IsInf(m.QErr, 0) || m.QErr < 0 {
		return bad("qerr %v: want finite and >= 0", m.QErr)
	}
	if m.Source.IsZero() {
		return bad("source digest is zero: want the BLAKE3 of the source tensor")
	}
	return nil
}

// checkRotatedK checks what a rotation requires of K beyond Validate's checks of each field: a rotated
// entry's K is the rotated row length, the source K zero-padded to a multiple of the Hadamard block
// (docs/orkpack.md 2), so the block divides K. The writer checks it on every entry it adds and the reader
// on every record; Geometry does not, since no size depends on the block (orkpipe rank sizes a rotation
// before one is chosen).
func (m Meta) checkRotatedK() error {
	if m.Rotation.Kind != RotNone && m.K%m.Rotation.Block != 0 {
		return fmt.Errorf("entry %q: hadamard block %d does not divide K = %d: a rotated K is padded to a multiple of the block", m.Name, m.Rotation.Block, m.K)
	}
	return nil
}

func validateName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("entry name %q: want 1..%d bytes", name, MaxNameLen)
	}
	if !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return fmt.Errorf("entry name %q: want UTF-8 without NUL", name)
	}
	if i := strings.LastIndexByte(name, '#'); i >= 0 {
		if _, _, ok := SplitExpert(name); !ok {
			return fmt.Errorf("entry name %q: text after '#' must be a decimal expert index", name)
		}
	}
	return nil
}

// ExpertName returns the entry name of expert e of a MUL_MAT_ID weight: "<name>#<e>".
func ExpertName(name string, e int) string { return name + "#" + strconv.Itoa(e) }

// SplitExpert splits "<name>#<e>" into the weight name and expert index.
func SplitExpert(entry string) (name string, expert int, ok bool) {
	i := strings.LastIndexByte(entry, '#')
	if i <= 0 || i == len(entry)-1 {
		return entry, 0, false
	}
	digits := entry[i+1:]
	if len(digits) > 1 && digits[0] == '0' {
		return entry, 0, false
	}
	e, err := strconv.Atoi(digits)
	if err != nil || e < 0 || strings.ContainsAny(digits, "+-") {
		return entry, 0, false
	}
	return entry[:i], e, true
}

// Tensor returns the source tensor the entry belongs to: the tensor of an MoE expert entry "<name>#<e>",
// else the entry's name.
func (m Meta) Tensor() string {
	if base, _, ok := SplitExpert(m.Name); ok {
		return base
	}
	return m.Name
}

// OwnedTensors returns the source tensors a pack with these entries owns, sorted, each once: the stub
// leaves exactly these as holes. An MoE expert entry "<name>#<e>" owns its whole tensor <name> (the
// stub holes all of it), so a pack owning an expert tensor must hold every expert of it. It is the one
// definition of ownership: emit-stub, `orkpipe stub --pack` and verify all use it.
func OwnedTensors(entries []Entry) []string {
	seen := make(map[string]bool, len(entries))
	var names []string
	for _, e := range entries {
		if t := e.Tensor(); !seen[t] {
			seen[t] = true
			names = append(names, t)
		}
	}
	slices.Sort(names)
	return names
}

// Geometry validates m and returns the Entry it becomes in a pack written with the given segment K (0 means
// tile.DefaultSegmentK): layout dimensions, codes/scales/total lengths. Offset, plan and digest are left zero.
// It is how anyone (the writer, the rank command, a planning test) sizes an entry without writing it. Its
// errors wrap ErrInput.
func Geometry(m Meta, segmentK int) (Entry, error) {
	e, err := geometry(m, segmentK)
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %w", ErrInput, err)
	}
	return e, nil
}

// geometry is Geometry without the writer's sentinel (the reader's decodeRecord wraps its errors as
// ErrIndex).
func geometry(m Meta, segmentK int) (Entry, error) {
	if err := m.validate(); err != nil {
		return Entry{}, err
	}
	if segmentK == 0 {
		segmentK = tile.DefaultSegmentK
	}
	l, err := tile.New(m.DType.Kind(), m.K, m.N, tile.WithSegmentK(segmentK), tile.WithNibbleOrder(m.Nibbles), tile.WithPageSize(PageSize))
	if err != nil {
		return Entry{}, fmt.Errorf("entry %q: %w", m.Name, err)
	}
	e := Entry{Meta: m, SegmentK: l.SegmentK(), Kp: l.Kp(), Np: l.Np(), Segments: l.Segments()}
	e.CodesLength = int64(l.Size())
	e.ScalesOffset = e.CodesLength
	e.ScalesLength = 4 * int64(m.N) * int64(m.Groups())
	e.Length = e.CodesLength + pageUp(e.ScalesLength)
	return e, nil
}

// Layout returns the tile layout of the entry's codes.
func (e Entry) Layout() (tile.Layout, error) {
	opts := []tile.Option{tile.WithNibbleOrder(e.Nibbles), tile.WithPageSize(PageSize)}
	if e.SegmentK != 0 {
		opts = append(opts, tile.WithSegmentK(e.SegmentK))
	}
	l, err := tile.New(e.DType.Kind(), e.K, e.N, opts...)
	if err != nil {
		return tile.Layout{}, fmt.Errorf("%w: entry %q: %v", ErrIndex, e.Name, err)
	}
	return l, nil
}

func pageUp(x int64) int64 { return (x + PageSize - 1) / PageSize * PageSize }

// TileWeight lays a weight's codes out as the entry it becomes in a pack written with segment K segmentK
// (0 = default): the bytes Writer.AddTiled takes (the tile stage's output). Scales are not part of them.
func TileWeight(wt Weight, segmentK int) (Entry, []byte, error) {
	return tileInto(nil, wt, segmentK)
}

// tileInto is TileWeight reusing buf's storage when it is large enough.
func tileInto(buf []byte, wt Weight, segmentK int) (Entry, []byte, error) {
	e, err := Geometry(wt.Meta, segmentK)
	if err != nil {
		return Entry{}, nil, err
	}
	l, err := e.Layout()
	if err != nil {
		return Entry{}, nil, err
	}
	if int64(cap(buf)) < e.CodesLength {
		buf = make([]byte, e.CodesLength)
	}
	codes := buf[:e.CodesLength]
	if e.DType == F16 {
		err = l.TileF16(codes, wt.F16)
	} else {
		err = l.Tile(codes, wt.Codes)
	}
	if err != nil {
		return Entry{}, nil, fmt.Errorf("%w: entry %q: %v", ErrInput, e.Name, err)
	}
	return e, codes, nil
}
