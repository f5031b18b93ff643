package pack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"

	"orkpipe/internal/blake3x"
	"orkpipe/ork/internal/durable"
	"orkpipe/ork/tile"
)

// Planner places entries on a board: resident bytes and IOMMU domain per entry, in index order.
// ork/board implements it; the writer calls it once, at Commit, with every entry's final geometry.
type Planner interface {
	Plan(ctx context.Context, entries []Entry) (Plan, error)
}

// Plan is a Planner's answer: Resident[i] and Domain[i] belong to entries[i].
type Plan struct {
	Board    Board
	Resident []int64
	Domain   []int
}

// Weight is one decoded entry: codes row-major [N][K] (int8 and int4 dtypes, int4 sign-extended) or binary16
// values (F16), and float32 scales row-major [N][groups].
type Weight struct {
	Meta
	Codes  []int8
	F16    []uint16
	Scales []float32
}

// Option configures a Writer; options validate their argument.
type Option func(*Writer) error

// WithSegmentK sets the maximum padded K of one native segment (default 8192, the RK3588 matmul limit).
func WithSegmentK(sk int) Option {
	return func(w *Writer) error {
		if sk <= 0 || sk%32 != 0 || sk > tile.MaxDim {
			return fmt.Errorf("%w: segment K %d: want a positive multiple of 32", ErrInput, sk)
		}
		w.segK = sk
		return nil
	}
}

// WithLogger sets the logger for progress at debug level.
func WithLogger(l *slog.Logger) Option {
	return func(w *Writer) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInput)
		}
		w.log = l
		return nil
	}
}

// WithResidency stores a residency plan (docs/orkpack.md 3.1) in the index; Commit checks it against the
// entries and their resident bytes. The plan is copied.
func WithResidency(r Residency) Option {
	return func(w *Writer) error {
		c := r
		c.Experts = make([]ResidentExpert, len(r.Experts))
		for i, x := range r.Experts {
			x.Entries = append([]string(nil), x.Entries...)
			c.Experts[i] = x
		}
		w.residency = &c
		return nil
	}
}

// Writer streams an orkpack to a temporary file beside its destination and publishes it at Commit.
// Memory is bounded by one entry plus the index metadata. Not safe for concurrent use.
type Writer struct {
	path    string
	tmp     string
	f       *os.File
	planner Planner
	segK    int
	log     *slog.Logger
	off     int64
	entries []Entry
	names   map[string]bool
	err     error // sticky: after a failed write the pack can only be abandoned
	closed  bool
	scratch []byte // tiling buffer reused across Add calls
	// residency is the plan WithResidency gave, or nil
	residency *Residency
}

// Create starts a pack that Commit will publish at path. It refuses a path that already exists.
func Create(ctx context.Context, path string, planner Planner, opts ...Option) (*Writer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if planner == nil {
		return nil, fmt.Errorf("%w: pack %s: a Planner is required (the plan is part of the index)", ErrInput, path)
	}
	w := &Writer{path: path, planner: planner, segK: tile.DefaultSegmentK, log: slog.Default(), names: map[string]bool{}, off: HeaderSize}
	for _, o := range opts {
		if err := o(w); err != nil {
			return nil, err
		}
	}
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("pack %s: already exists; refusing to replace it", path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", path, err)
	}
	w.f, w.tmp = f, f.Name()
	if _, err := f.Write(make([]byte, HeaderSize)); err != nil { // reserved; written at Commit
		w.Close()
		return nil, fmt.Errorf("pack %s: reserving the header: %w", w.tmp, err)
	}
	return w, nil
}

func (w *Writer) usable(ctx context.Context) error {
	switch {
	case w.closed:
		return fmt.Errorf("pack %s: %w", w.path, ErrClosed)
	case w.err != nil:
		return fmt.Errorf("pack %s: an earlier write failed: %w", w.path, w.err)
	}
	return ctx.Err()
}

// Add tiles one weight and appends it. Entries are stored, planned and indexed in Add order, so the caller
// decides the (execution) order and must add deterministically.
func (w *Writer) Add(ctx context.Context, wt Weight) error {
	if err := w.usable(ctx); err != nil {
		return err
	}
	if _, err := w.prepare(wt.Meta); err != nil {
		return err
	}
	e, codes, err := tileInto(w.scratch, wt, w.segK)
	if err != nil {
		return err
	}
	w.scratch = codes[:0] // reused by the next Add: memory stays at one entry
	return w.write(e, codes, wt.Scales)
}

// AddTiled appends an entry whose codes are already laid out (the tile stage's output): exactly the layout's
// codes length must be readable from codes. Before anything is written the bytes are checked the way the
// untiler would reject them (tile.Layout.CheckPadding: every padding code and padding byte zero). It is
// Prepare followed by AddPrepared.
func (w *Writer) AddTiled(ctx context.Context, m Meta, codes io.Reader, scales []float32) error {
	if err := w.usable(ctx); err != nil {
		return err
	}
	p, err := w.Prepare(m, codes, scales, nil)
	if err != nil {
		return err
	}
	return w.AddPrepared(ctx, p)
}

// Prepared is a pre-tiled entry read, checked and hashed by Writer.Prepare, which Writer.AddPrepared
// appends.
type Prepared struct {
	e      Entry
	codes  []byte // exactly e.CodesLength bytes
	scales []byte // little-endian float32, zero-padded to a whole page
}

// Name is the prepared entry's name.
func (p *Prepared) Name() string { return p.e.Name }

// Buffer returns the storage of the prepared codes, for a later Prepare to reuse once AddPrepared of p
// has returned (for PrepareBytes, the caller's codes).
func (p *Prepared) Buffer() []byte { return p.codes[:0] }

// Prepare does AddTiled's work up to the write: it reads the entry's laid-out codes (exactly the layout's
// codes length) into buf's storage when it is large enough (else into a new buffer), checks them as the
// untiler would (tile.Layout.CheckPadding), checks the scales finite and hashes the entry as it will be
// stored. It writes nothing and reads only the Writer's settings, so it may run in one goroutine while
// another calls AddPrepared for an earlier entry: a caller adding many entries prepares the next while
// the last is written.
func (w *Writer) Prepare(m Meta, codes io.Reader, scales []float32, buf []byte) (*Prepared, error) {
	e, err := w.geometry(m)
	if err != nil {
		return nil, err
	}
	if want := int64(e.N) * int64(e.Groups()); int64(len(scales)) != want {
		return nil, fmt.Errorf("%w: entry %q: %d scales, want N*groups = %d*%d = %d", ErrInput, e.Name, len(scales), e.N, e.Groups(), want)
	}
	if int64(cap(buf)) < e.CodesLength {
		buf = make([]byte, e.CodesLength)
	}
	buf = buf[:e.CodesLength]
	if n, err := io.ReadFull(codes, buf); err != nil {
		return nil, fmt.Errorf("%w: entry %q: tiled codes: read %d of %d bytes: %v", ErrInput, e.Name, n, e.CodesLength, err)
	}
	if n, _ := codes.Read(make([]byte, 1)); n != 0 {
		return nil, fmt.Errorf("%w: entry %q: tiled codes longer than the layout's %d bytes", ErrInput, e.Name, e.CodesLength)
	}
	sb, err := scaleBytes(e, scales)
	if err != nil {
		return nil, err
	}
	return prepare(e, buf, sb)
}

// PrepareBytes is Prepare for an entry whose parts are already in memory (a mapped tiled-entry file):
// codes exactly the layout's codes length, used in place — the caller must keep them unchanged until
// AddPrepared of the result has returned —, and scales the N*groups scales as little-endian float32
// (copied, each checked finite).
func (w *Writer) PrepareBytes(m Meta, codes, scales []byte) (*Prepared, error) {
	e, err := w.geometry(m)
	if err != nil {
		return nil, err
	}
	if int64(len(codes)) != e.CodesLength {
		return nil, fmt.Errorf("%w: entry %q: %d bytes of tiled codes, the layout has %d", ErrInput, e.Name, len(codes), e.CodesLength)
	}
	if int64(len(scales)) != e.ScalesLength {
		return nil, fmt.Errorf("%w: entry %q: %d bytes of scales, want N*groups*4 = %d*%d*4 = %d", ErrInput, e.Name, len(scales), e.N, e.Groups(), e.ScalesLength)
	}
	sb := make([]byte, pageUp(e.ScalesLength))
	copy(sb, scales)
	for i := 0; i < len(scales); i += 4 {
		if bits := le.Uint32(sb[i:]); bits>>23&0xff == 0xff {
			return nil, fmt.Errorf("%w: entry %q: scale %d (row %d) is %v: want finite", ErrInput, e.Name, i/4, i/4/e.Groups(), math.Float32frombits(bits))
		}
	}
	return prepare(e, codes, sb)
}

// prepare checks an entry's codes as the untiler would and hashes it as it will be stored (codes, then
// the page-padded scales sb).
func prepare(e Entry, codes, sb []byte) (*Prepared, error) {
	l, err := e.Layout()
	if err != nil {
		return nil, err
	}
	if err := l.CheckPadding(codes); err != nil {
		return nil, fmt.Errorf("%w: entry %q: tiled codes would not decode: %v", ErrInput, e.Name, err)
	}
	h := blake3x.New()
	h.Write(codes)
	h.Write(sb)
	e.Digest = Digest(h.Sum256())
	return &Prepared{e: e, codes: codes, scales: sb}, nil
}

// AddPrepared appends an entry Prepare returned (of this Writer). Entries are stored, planned and indexed
// in the order they are added.
func (w *Writer) AddPrepared(ctx context.Context, p *Prepared) error {
	if err := w.usable(ctx); err != nil {
		return err
	}
	if w.names[p.e.Name] {
		return fmt.Errorf("%w: entry %q added twice", ErrInput, p.e.Name)
	}
	if err := w.writeBytes(p.e, p.codes, p.scales); err != nil {
		return err
	}
	w.record(p.e)
	return nil
}

// geometry is Geometry with the writer's segment K, and checkRotatedK: what every added entry must pass.
func (w *Writer) geometry(m Meta) (Entry, error) {
	e, err := Geometry(m, w.segK)
	if err != nil {
		return Entry{}, err
	}
	if err := e.checkRotatedK(); err != nil {
		return Entry{}, fmt.Errorf("%w: %w", ErrInput, err)
	}
	return e, nil
}

func (w *Writer) prepare(m Meta) (Entry, error) {
	e, err := w.geometry(m)
	if err != nil {
		return Entry{}, err
	}
	if w.names[e.Name] {
		return Entry{}, fmt.Errorf("%w: entry %q added twice", ErrInput, e.Name)
	}
	return e, nil
}

// write appends codes (already CodesLength bytes) and the page-padded scales, hashing as it goes.
func (w *Writer) write(e Entry, codes []byte, scales []float32) error {
	if want := int64(e.N) * int64(e.Groups()); int64(len(scales)) != want {
		return fmt.Errorf("%w: entry %q: %d scales, want N*groups = %d*%d = %d", ErrInput, e.Name, len(scales), e.N, e.Groups(), want)
	}
	sb, err := scaleBytes(e, scales)
	if err != nil {
		return err
	}
	// Hash while writing: both only read the buffers.
	hashed := make(chan Digest, 1)
	go func() {
		h := blake3x.New()
		h.Write(codes)
		h.Write(sb)
		hashed <- Digest(h.Sum256())
	}()
	werr := w.writeBytes(e, codes, sb)
	e.Digest = <-hashed
	if werr != nil {
		return werr
	}
	w.record(e)
	return nil
}

// scaleBytes returns scales (N*groups of them) little-endian, zero-padded to a whole page, after checking
// each finite.
func scaleBytes(e Entry, scales []float32) ([]byte, error) {
	sb := make([]byte, pageUp(e.ScalesLength))
	for i, s := range scales {
		if math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
			return nil, fmt.Errorf("%w: entry %q: scale %d (row %d) is %v: want finite", ErrInput, e.Name, i, i/e.Groups(), s)
		}
		le.PutUint32(sb[4*i:], math.Float32bits(s))
	}
	return sb, nil
}

// writeChunk is the most bytes writeBytes passes to one write. The page cache takes folios no larger
// than a write, and on a virtual machine whose free memory the hypervisor reclaims (free page
// reporting) the first touch of large folios costs several times that of small ones: writing 8 fresh
// files of 42.5 MiB took 0.70-0.85 s of system time in one write each, 0.26-0.36 s in 1 MiB writes and
// 0.09-0.14 s in 64 KiB writes (docs/performance-log.md, "RTN, session 11: a PVM host").
const writeChunk = 64 << 10

// writeBytes writes an entry's codes and page-padded scales at the end of the pack, in writeChunk
// calls (a failure is sticky), and starts their writeback, so that Commit's fsync waits on little more
// than the last entry.
func (w *Writer) writeBytes(e Entry, codes, sb []byte) error {
	for _, b := range [][]byte{codes, sb} {
		for off := 0; off < len(b); off += writeChunk {
			if _, err := w.f.Write(b[off:min(off+writeChunk, len(b))]); err != nil {
				w.err = err
				return fmt.Errorf("pack %s: entry %q: %w", w.tmp, e.Name, err)
			}
		}
	}
	durable.StartWriteback(w.f, w.off, int64(len(codes)+len(sb)))
	return nil
}

// record indexes an entry (its Digest set) just written at the end of the pack.
func (w *Writer) record(e Entry) {
	e.Offset = w.off
	w.off += e.Length
	w.names[e.Name] = true
	w.entries = append(w.entries, e)
	w.log.Debug("orkpack entry", "name", e.Name, "dtype", e.DType, "bytes", e.Length, "digest", e.Digest)
}

// Commit plans the entries, writes index, footer and header, fsyncs, checks the result by reopening it, and
// publishes the pack at its path without replacing anything there. The Writer is closed afterwards.
func (w *Writer) Commit(ctx context.Context) (err error) {
	if err := w.usable(ctx); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	plan, err := w.planner.Plan(ctx, append([]Entry(nil), w.entries...))
	if err != nil {
		return fmt.Errorf("pack %s: planning: %w", w.path, err)
	}
	if err := w.apply(plan); err != nil {
		return err
	}
	if w.residency != nil {
		if err := checkResidency(w.residency, w.entries); err != nil {
			return fmt.Errorf("%w: pack %s: %v", ErrPlan, w.path, err)
		}
	}
	index := encodeIndex(plan.Board, w.entries, w.residency)
	t := trailer{version: Version, indexOffset: w.off, indexLength: int64(len(index)), indexDigest: blake3x.Sum256(index), count: uint32(len(w.entries))}
	t.total = t.indexOffset + t.indexLength + FooterSize
	if _, err := w.f.Write(append(index, encodeFooter(t)...)); err != nil {
		return fmt.Errorf("pack %s: writing the index: %w", w.tmp, err)
	}
	if _, err := w.f.WriteAt(encodeHeader(t), 0); err != nil {
		return fmt.Errorf("pack %s: writing the header: %w", w.tmp, err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("pack %s: fsync: %w", w.tmp, err)
	}
	if _, err := NewReader(ctx, w.f, t.total, w.tmp); err != nil {
		return fmt.Errorf("pack %s: re-reading what was written: %w", w.tmp, err)
	}
	if err := w.f.Chmod(0o444); err != nil {
		return fmt.Errorf("pack %s: %w", w.tmp, err)
	}
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("pack %s: close: %w", w.tmp, err)
	}
	w.f = nil
	if err := os.Link(w.tmp, w.path); err != nil {
		return fmt.Errorf("pack %s: publishing: %w", w.path, err)
	}
	os.Remove(w.tmp)
	w.closed = true
	return durable.SyncDir(filepath.Dir(w.path))
}

// apply checks a plan against the entries and records it.
func (w *Writer) apply(p Plan) error {
	n := len(w.entries)
	if len(p.Resident) != n || len(p.Domain) != n {
		return fmt.Errorf("%w: pack %s: plan covers %d/%d entries, pack has %d", ErrPlan, w.path, len(p.Resident), len(p.Domain), n)
	}
	if l := len(p.Board.Name); l < 1 || l > 255 {
		return fmt.Errorf("%w: pack %s: board name %q: want 1..255 bytes", ErrPlan, w.path, p.Board.Name)
	}
	for _, c := range []byte(p.Board.Name) {
		if c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: pack %s: board name %q: want printable ASCII", ErrPlan, w.path, p.Board.Name)
		}
	}
	var total int64
	for i := range w.entries {
		if p.Resident[i] < 0 || p.Domain[i] < 0 || p.Domain[i] >= p.Board.Domains {
			return fmt.Errorf("%w: pack %s: entry %q: resident %d, domain %d of %d", ErrPlan, w.path, w.entries[i].Name, p.Resident[i], p.Domain[i], p.Board.Domains)
		}
		w.entries[i].ResidentBytes, w.entries[i].Domain = p.Resident[i], p.Domain[i]
		var ok bool
		if total, ok = addSize(total, p.Resident[i]); !ok {
			return fmt.Errorf("%w: pack %s: entry %q: resident bytes %d take the entries' sum past %d", ErrPlan, w.path, w.entries[i].Name, p.Resident[i], int64(math.MaxInt64))
		}
	}
	if total != p.Board.Resident {
		return fmt.Errorf("%w: pack %s: entries' resident bytes sum to %d, plan total says %d", ErrPlan, w.path, total, p.Board.Resident)
	}
	return nil
}

// Close abandons an uncommitted pack (removing its temporary file); after Commit it does nothing.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	var errs []error
	if w.f != nil {
		errs = append(errs, w.f.Close())
		w.f = nil
	}
	if err := os.Remove(w.tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
