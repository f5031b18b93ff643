package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"orkpipe/internal/hugebuf"
)

// pieceBuf is a buffer of PieceSize bytes that pieces are read into, outside the Go heap
// (hugebuf: huge pages, so that a fresh buffer costs two page faults instead of a thousand — 14
// µs each on a PVM guest, where a 4 MiB buffer from the heap cost ~14 ms of faults to fill).
type pieceBuf struct {
	b    []byte
	free func()
}

// idlePieces holds up to GOMAXPROCS idle piece buffers for the next reads; getPiece maps a new
// one when it is empty, and putPiece unmaps one it has no room for.
var idlePieces = make(chan *pieceBuf, runtime.GOMAXPROCS(0))

// getPiece returns an idle piece buffer or a new one; putPiece gives it back.
func getPiece() *pieceBuf {
	select {
	case p := <-idlePieces:
		return p
	default:
	}
	b, free := hugebuf.Make[byte](PieceSize)
	return &pieceBuf{b: b, free: free}
}

// putPiece keeps p for the next getPiece, or unmaps it when GOMAXPROCS buffers are already idle.
func putPiece(p *pieceBuf) {
	select {
	case idlePieces <- p:
	default:
		p.free()
	}
}

// pieceSlots bounds the pieces being hashed at once across all concurrent hashParallel calls (one
// per CPU), so that hashing many big files at once (VerifyAll, `orkpipe hash a b c`) neither
// oversubscribes the CPUs nor holds more than GOMAXPROCS piece buffers.
var pieceSlots = make(chan struct{}, runtime.GOMAXPROCS(0))

// How the parallel hashes read pieces: mapped (the page cache hashed in place, no copy), read
// with pread into reused piece buffers, or chosen per hash by a probe of both (probePieces, the
// default). Tests and benchmarks set hashMode to compare them.
type pieceMode int

const (
	probePieces pieceMode = iota
	readPieces
	mapPieces
)

var hashMode = probePieces

func (m pieceMode) String() string {
	switch m {
	case readPieces:
		return "read"
	case mapPieces:
		return "mapped"
	}
	return "probe"
}

// SetHashReads makes the parallel hashes of this process read their pieces with pread into reused
// piece buffers (read true) instead of choosing by probe (false, the default). The store's scan for
// zero blocks of the files it adopts (digHoles) reads either way (zeroBlocks). Call it before any
// hash starts. Builds read: on a
// PVM guest (shadow page tables) hashing a mapped file costs more CPU in the hash itself than the
// copy saves, and the mapping's populate and drop cost page-table changes — a cold [1.0] RTN build's
// user CPU went from 5.3-6.0 s to 3.5-4.0 s (docs/performance-log.md, "RTN, session 11: a PVM host").
// The hash command and the store's verification probe (modeProbe).
func SetHashReads(read bool) {
	hashMode = probePieces
	if read {
		hashMode = readPieces
	}
}

// modeProbe chooses between mapped and read pieces for one hash: which is faster depends on how
// the file's pages came into the page cache, not on the file or the host alone. On a PVM guest
// (docs/performance-log.md, "Hashing, session 24: mapped or read, by probe") a 2 GiB file written in
// writes of 1 MiB (as cp and most downloads write), whose page cache is small folios, hashed in
// 0.56-0.63 s mapped and 0.21-0.22 s read; written in 4 MiB writes, or read back from disk
// (readahead's large folios), in 0.17-0.18 s mapped and 0.21-0.22 s read. The cost of the small folios is in the hash, not in
// populating the mapping: each first touch of a 4 KiB page traps to the hypervisor. So the first
// takes are probes, probeTakes of each way, each timed (bytes read from the file per second of the
// take's wall time), and every later take reads when reading's best rate beats mapping's by
// readMargin, else maps. The best and not the first: a first take of either way pays one-time
// costs (a fresh piece buffer's pages; the mapping's first touches) that would count against it.
// Takes without data (holes) measure nothing. Takes that start while both ways' probes run are
// mapped.
type modeProbe struct {
	mu   sync.Mutex
	rate [2]float64 // best bytes per second read (0) and mapped (1)
	n    [2]int     // probes measured
	busy [2]bool    // a probe of that way is running
	done bool       // chosen: mapd says which
	mapd bool
}

// readMargin is how much faster than mapping reading must probe to be chosen. The probes favour
// reading: they run side by side, so a read probe's copies meet less memory traffic than a whole
// hash of reads does, and one slow mapped take moves the mapped figure more than a read take moves
// the read one. Measured (the best probes, PVM guest, session 24): where a whole 2 GiB hash mapped
// takes 0.77-0.85x the time of one read, reading probed at 0.80-1.53x mapping's rate; where mapped
// takes 2.5-2.8x the time, at 2.3-3.9x. Between the two, nearer the lower: a wrong choice costs
// up to 1.3x where the folios are large and 2.5x where they are small.
const readMargin = 1.8

// probeTakes is how many takes of each way the probe times; probeGroup is the most pieces a mapped
// probe hashes (16 MiB: its populate and drop amortized as in a longer take); a read probe hashes
// one piece (reading has no per-take cost to amortize), so probing costs at most
// probeTakes·(probeGroup+1) pieces of the file hashed in the way not chosen.
const (
	probeTakes = 2
	probeGroup = minGroup
)

// newProbe returns the probe of a new hash (a variable: tests start hashes with a probe that has
// already chosen, and keep the probe to see that it chose).
var newProbe = func() *modeProbe { return &modeProbe{} }

// pick returns how the next take reads its pieces and whether it is a probe (time it and record).
func (p *modeProbe) pick() (mapped, probe bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return p.mapd, false
	}
	for _, m := range []int{1, 0} {
		if p.n[m] < probeTakes && !p.busy[m] {
			p.busy[m] = true
			return m == 1, true
		}
	}
	return true, false
}

// record reports a probe: bytes read from the file in d. A probe that read nothing measures
// nothing; the way is probed again.
func (p *modeProbe) record(mapped bool, bytes int64, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := 0
	if mapped {
		m = 1
	}
	p.busy[m] = false
	if bytes > 0 && d > 0 {
		p.rate[m] = max(p.rate[m], float64(bytes)/d.Seconds())
		p.n[m]++
	}
	if p.n[0] >= probeTakes && p.n[1] >= probeTakes {
		p.done, p.mapd = true, p.rate[0] < readMargin*p.rate[1]
	}
}

// hashParallel hashes f (size bytes, more than one piece) with workers goroutines, each reading
// whole pieces (mapped, or pread) and computing their subtree chaining values; the values are
// merged in order into the root. The digest is identical to a serial BLAKE3 of the same bytes.
func hashParallel(ctx context.Context, f *os.File, size int64, workers int) (Digest, error) {
	return hashRange(ctx, f, 0, size, workers)
}

// hashRange is hashParallel of the size bytes of f at base, hashed as an input of their own: its
// pieces are counted from base. Unless the pieces are read (hashMode), the range is mapped once,
// read-only, before the workers start; each group of pieces a worker takes mapped is populated,
// hashed and dropped from the mapping again (dropPages), so at most groupPieces(workers) pieces per
// worker are resident. One mapping rather than one per group: mmap and munmap take the address
// space's lock for writing and waited for the other worker's populate (docs/performance-log.md,
// "Hashing, session 8"); populate and dropPages only read it. The takes shrink towards the end
// (nextTake), so that the workers finish at most about one piece apart. With probePieces each take
// is mapped or read as modeProbe says.
func hashRange(ctx context.Context, f *os.File, base, size int64, workers int) (Digest, error) {
	n := (size + PieceSize - 1) / PieceSize
	cvs := make([]ChainValue, n)
	var data *mapping // the range mapped, or nil: pieces are read
	if hashMode != readPieces {
		m, err := mapRange(f, base, size)
		if err != nil {
			return Digest{}, err
		}
		defer unmap(m.m)
		data = &m
	}
	var probe *modeProbe
	if hashMode == probePieces {
		probe = newProbe()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	k := groupPieces(workers)
	for range min(int64(workers), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				take, mapped, timed := k, data != nil, false
				if probe != nil {
					if mapped, timed = probe.pick(); timed {
						take = min(k, probeGroup)
						if !mapped {
							take = 1
						}
					}
				}
				g, to := nextTake(&next, n, take, workers)
				if g >= n || ctx.Err() != nil {
					return
				}
				select {
				case pieceSlots <- struct{}{}:
				case <-ctx.Done():
					return
				}
				src := data
				if !mapped {
					src = nil
				}
				start := time.Now()
				read, err := hashGroup(f, src, base, size, g, to, cvs)
				if timed {
					probe.record(mapped, read, time.Since(start))
				}
				<-pieceSlots
				if err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return Digest{}, err
	}
	return Digest{sum: rootOf(cvs)}, nil
}

// A worker takes up to groupPieces pieces at once; pieces with data all through are populated and
// dropped together, one call of each per take. Every drop is a TLB shootdown that the other CPUs
// running the process must answer before it returns (docs/performance-log.md, "Hashing, session 10"),
// so larger takes cost less system time but keep more of the file resident. By default a take is
// minGroup pieces; SetHashResident raises it, up to maxGroup.
const (
	minGroup = 4  // 16 MiB
	maxGroup = 64 // 256 MiB
)

// hashResident is the process's budget of mapped file pages its parallel hashes keep resident at
// once, all workers together (SetHashResident); 0 until set.
var hashResident atomic.Int64

// SetHashResident lets the parallel hashes of this process keep up to bytes of mapped file pages
// resident at once, all workers together: takes of bytes/GOMAXPROCS, between minGroup and maxGroup
// pieces (16-256 MiB) per worker. The resident bound is GOMAXPROCS · groupPieces pieces (pieceSlots
// admits GOMAXPROCS takes at once in the process): by default 16 MiB per worker, which a build's
// memory reserve (cmd/orkpipe, goMemoryLimit) absorbs; the hash command, whose only work is
// hashing, sets 512 MiB. The pages are the file's page cache, mapped; they count in the process's RSS.
func SetHashResident(bytes int64) { hashResident.Store(max(0, bytes)) }

// groupPieces is the largest take of each of workers workers.
func groupPieces(workers int) int64 {
	return min(maxGroup, max(minGroup, hashResident.Load()/PieceSize/int64(max(1, workers))))
}

// nextTake claims the next pieces [from, to) of n for a worker: k pieces at most, and no more than
// a (2·workers)-th of the pieces not yet claimed, at least one. The takes shrink towards the end
// (guided self-scheduling), so that the last ones are single pieces and no worker is left hashing
// a large group while the others have nothing to do. from >= n: nothing is left.
func nextTake(next *atomic.Int64, n, k int64, workers int) (from, to int64) {
	for {
		cur := next.Load()
		if cur >= n {
			return n, n
		}
		take := min(k, max(1, (n-cur)/(2*int64(max(1, workers)))))
		if next.CompareAndSwap(cur, cur+take) {
			return cur, cur + take
		}
	}
}

// hashGroup stores the chaining values of pieces [from, to) of the size bytes of f at base in cvs
// and returns how many bytes it read from the file (the pieces not in holes). data is that range
// mapped (mapRange), or nil to read pieces with pread. A
// group without holes (SEEK_HOLE finds none before its end) is hashed from the mapping in one go;
// otherwise each piece on its own: a piece entirely in a hole is hashed as zeros from memory (a
// stub's pack-owned tensors: faulting in page-cache pages of zeros would cost memory and time),
// the others from the mapping (or read).
func hashGroup(f *os.File, data *mapping, base, size, from, to int64, cvs []ChainValue) (read int64, err error) {
	if data != nil && to-from > 1 && noHoles(f, base+from*PieceSize, min(to*PieceSize, size)-from*PieceSize) {
		return min(to*PieceSize, size) - from*PieceSize, hashMapped(f, data, base, size, from, to, cvs[from:to])
	}
	for i := from; i < to; i++ {
		n := min(PieceSize, size-i*PieceSize)
		if hole, herr := pieceIsHole(f, base+i*PieceSize, n); herr == nil && hole {
			cvs[i] = zeroPieceCV(i*PieceSize, n)
			continue
		}
		if data != nil {
			err = hashMapped(f, data, base, size, i, i+1, cvs[i:i+1])
		} else {
			buf := getPiece()
			err = hashPiece(f, base, size, i, buf.b, &cvs[i])
			putPiece(buf)
		}
		if err != nil {
			return read, err
		}
		read += n
	}
	return read, nil
}

// noHoles reports whether [off, off+n) of f lies inside the file and has no hole (SEEK_HOLE
// finds the first one at or past its end). An error (no SEEK_HOLE) means "not known": false.
func noHoles(f *os.File, off, n int64) bool {
	h, err := unix.Seek(int(f.Fd()), off, unix.SEEK_HOLE)
	return err == nil && h >= off+n
}

// hashPiece reads piece i of the size bytes of f at base and stores its subtree chaining value in
// out.
func hashPiece(f *os.File, base, size, i int64, buf []byte, out *ChainValue) error {
	off := i * PieceSize
	want := min(PieceSize, size-off)
	got, err := f.ReadAt(buf[:want], base+off)
	if int64(got) < want {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("file ended at %d, expected %d bytes (changed while reading?)", base+off+int64(got), base+size)
		}
		return fmt.Errorf("reading %s at %d: %w", f.Name(), base+off, err)
	}
	*out = SubtreeCV(buf[:want], uint64(off/ChunkSize))
	return nil
}

// mapping is a range of a file mapped from the page boundary at or before its start.
type mapping struct {
	m    []byte // the mapping, page-aligned
	lead int64  // offset of the range's first byte in m
}

// mapRange maps the size bytes of f at base read-only and shared.
func mapRange(f *os.File, base, size int64) (mapping, error) {
	lead := base % int64(os.Getpagesize())
	m, err := mapReadOnly(int(f.Fd()), base-lead, int(lead+size))
	if err != nil {
		return mapping{}, fmt.Errorf("map %s at %d: %w", f.Name(), base, err)
	}
	return mapping{m: m, lead: lead}, nil
}

// span returns bytes [lo, hi) of the range and the whole pages of the mapping that hold them.
func (r *mapping) span(lo, hi int64) (bytes, pages []byte) {
	pg := int64(os.Getpagesize())
	a, b := r.lead+lo, r.lead+hi
	return r.m[a:b], r.m[a&^(pg-1) : min(int64(len(r.m)), (b+pg-1)&^(pg-1))]
}

// hashMapped stores in out the subtree chaining values of pieces [from, to) of data, the size
// bytes of f at base mapped: it populates their pages, hashes them and drops the pages from the
// mapping again. If the file shrank meanwhile, touching the pages past its end raises SIGBUS; the
// fault becomes a recovered panic on this goroutine (debug.SetPanicOnFault) and an error naming
// the file, never a crash or a digest. (Why mapped rather than read by pread: BenchmarkHash2GiB,
// docs/performance.md.)
func hashMapped(f *os.File, data *mapping, base, size, from, to int64, out []ChainValue) (err error) {
	off := from * PieceSize
	span, pages := data.span(off, min(to*PieceSize, size))
	// Map the whole span in one call instead of a page fault per 64 KiB (fault-around).
	// Measured on 2 GiB, 7 interleaved runs at load 8-15: the same CPU time (0.73 s), median wall
	// 2.00 s against 2.41 s (2 workers) and 2.28 s against 2.75 s (1 worker): fewer kernel entries,
	// fewer preemptions. Only a hint: if it fails (a kernel before 5.14, or a file that shrank), the
	// hash faults the pages in itself and a missing page raises SIGBUS as before.
	populate(pages)
	defer dropPages(pages)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading %s at %d: fault (%v): file ended before %d bytes (changed while reading?)", f.Name(), base+off, r, base+size)
		}
	}()
	for j := range out {
		p := span[j*PieceSize : min((j+1)*PieceSize, len(span))]
		out[j] = SubtreeCV(p, uint64((off+int64(j)*PieceSize)/ChunkSize))
	}
	return nil
}

// zeros returns PieceSize zero bytes (shared, never written), hashed in place of file holes and
// compared against. Allocated on first use: a 4 MiB allocation at package init cost every orkpipe
// command ~1.7 ms of start-up (GODEBUG=inittrace=1), most of which never hash a hole.
var zeros = sync.OnceValue(func() []byte { return make([]byte, PieceSize) })

// zeroCVs remembers the chaining value of a whole piece of zeros by its offset: it depends on
// nothing else, and the same holes are hashed several times in one build (a stub's pack-owned
// tensors: when its node writes it, when the store adopts it, when a later node reads it). At most
// maxZeroCVs entries (32 bytes each: 256 GiB of holes); past that, pieces are hashed every time.
var zeroCVs struct {
	sync.Mutex
	m map[int64]ChainValue
}

const maxZeroCVs = 1 << 16

// zeroPieceCV returns the chaining value of n zero bytes at off (a piece boundary).
func zeroPieceCV(off, n int64) ChainValue {
	if n != PieceSize {
		return SubtreeCV(zeros()[:n], uint64(off/ChunkSize))
	}
	zeroCVs.Lock()
	cv, ok := zeroCVs.m[off]
	zeroCVs.Unlock()
	if ok {
		return cv
	}
	cv = SubtreeCV(zeros(), uint64(off/ChunkSize))
	zeroCVs.Lock()
	if zeroCVs.m == nil {
		zeroCVs.m = map[int64]ChainValue{}
	}
	if len(zeroCVs.m) < maxZeroCVs {
		zeroCVs.m[off] = cv
	}
	zeroCVs.Unlock()
	return cv
}

// pieceIsHole reports whether [off, off+n) of f lies inside the file and holds no data (SEEK_DATA
// finds none before its end). lseek moves the shared file offset, which nothing here depends on (pieces are read by offset).
// An error (a filesystem without SEEK_DATA) means "unknown": the caller reads the piece.
func pieceIsHole(f *os.File, off, n int64) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Size < off+n {
		return false, err // past the end is not a hole: reading it reports the short file
	}
	data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return true, nil // no data at or after off
	}
	if err != nil {
		return false, err
	}
	return data >= off+n, nil
}

// mapReadOnly maps n bytes of fd at off read-only and shared (populate, dropPages and unmap: sys_linux.go).
func mapReadOnly(fd int, off int64, n int) ([]byte, error) {
	p, err := unix.MmapPtr(fd, off, nil, uintptr(n), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}
