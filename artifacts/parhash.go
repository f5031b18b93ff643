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
	"unsafe"

	"golang.org/x/sys/unix"
)

var piecePool = sync.Pool{New: func() any { b := make([]byte, PieceSize); return &b }}

// pieceSlots bounds the pieces being hashed at once across all concurrent hashParallel calls (one
// per CPU), so that hashing many big files at once (VerifyAll, `orkpipe hash a b c`) neither
// oversubscribes the CPUs nor holds more than GOMAXPROCS piece buffers.
var pieceSlots = make(chan struct{}, runtime.GOMAXPROCS(0))

// mmapPieces selects how hashParallel reads pieces: mapped (the default: the hash reads the page
// cache in place, no copy) or pread into a buffer (SetHashReads; tests and benchmarks compare both).
var mmapPieces = true

// SetHashReads makes the parallel hashes of this process, and the store's scan for zero blocks of the
// files it adopts (digHoles), read their pieces with pread into reused piece buffers (read true)
// instead of mapping them (false, the default); call it before any hash starts. Builds read: on a
// PVM guest (shadow page tables) hashing a mapped file costs more CPU in the hash itself than the
// copy saves, and the mapping's populate and drop cost page-table changes — a cold [1.0] RTN build's
// user CPU went from 5.3-6.0 s to 3.5-4.0 s (docs/performance.md, "RTN, session 11: a PVM host").
// The hash command keeps mapping (its own measures: "Hashing, session 10").
func SetHashReads(read bool) { mmapPieces = !read }

// hashParallel hashes f (size bytes, more than one piece) with workers goroutines, each reading
// whole pieces (mapped, or pread) and computing their subtree chaining values; the values are
// merged in order into the root. The digest is identical to a serial BLAKE3 of the same bytes.
func hashParallel(ctx context.Context, f *os.File, size int64, workers int) (Digest, error) {
	return hashRange(ctx, f, 0, size, workers)
}

// hashRange is hashParallel of the size bytes of f at base, hashed as an input of their own: its
// pieces are counted from base. With mmapPieces the range is mapped once, read-only, before the
// workers start; each group of pieces a worker takes is populated, hashed and dropped from the
// mapping again (dropPages), so at most groupPieces(workers) pieces per worker are resident. One
// mapping rather than one per group: mmap and munmap take the address space's lock for writing and
// waited for the other worker's populate (docs/performance.md, "Hashing, session 8"); populate and
// dropPages only read it. The takes shrink towards the end (nextTake), so that the workers finish
// at most about one piece apart.
func hashRange(ctx context.Context, f *os.File, base, size int64, workers int) (Digest, error) {
	n := (size + PieceSize - 1) / PieceSize
	cvs := make([]ChainValue, n)
	var data *mapping // the range mapped, or nil: pieces are read
	if mmapPieces {
		m, err := mapRange(f, base, size)
		if err != nil {
			return Digest{}, err
		}
		defer unmap(m.m)
		data = &m
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
				g, to := nextTake(&next, n, k, workers)
				if g >= n || ctx.Err() != nil {
					return
				}
				select {
				case pieceSlots <- struct{}{}:
				case <-ctx.Done():
					return
				}
				err := hashGroup(f, data, base, size, g, to, cvs)
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
// running the process must answer before it returns (docs/performance.md, "Hashing, session 10"),
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

// hashGroup stores the chaining values of pieces [from, to) of the size bytes of f at base in cvs.
// data is that range mapped (mapRange), or nil to read pieces with pread (tests and benchmarks). A
// group without holes (SEEK_HOLE finds none before its end) is hashed from the mapping in one go;
// otherwise each piece on its own: a piece entirely in a hole is hashed as zeros from memory (a
// stub's pack-owned tensors: faulting in page-cache pages of zeros would cost memory and time),
// the others from the mapping (or read).
func hashGroup(f *os.File, data *mapping, base, size, from, to int64, cvs []ChainValue) error {
	if data != nil && to-from > 1 && noHoles(f, base+from*PieceSize, min(to*PieceSize, size)-from*PieceSize) {
		return hashMapped(f, data, base, size, from, to, cvs[from:to])
	}
	for i := from; i < to; i++ {
		n := min(PieceSize, size-i*PieceSize)
		var err error
		if hole, herr := pieceIsHole(f, base+i*PieceSize, n); herr == nil && hole {
			cvs[i] = zeroPieceCV(i*PieceSize, n)
		} else if data != nil {
			err = hashMapped(f, data, base, size, i, i+1, cvs[i:i+1])
		} else {
			buf := piecePool.Get().(*[]byte)
			err = hashPiece(f, base, size, i, *buf, &cvs[i])
			piecePool.Put(buf)
		}
		if err != nil {
			return err
		}
	}
	return nil
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

// mapReadOnly maps n bytes of fd at off read-only and shared. The slow system calls on the mapping —
// populating it, dropping its pages, unmapping it — are made without telling the Go scheduler
// (RawSyscall): a worker that entered a syscall state for each of them (~0.2-0.5 ms per 4 MiB) had
// the runtime hand its P over and wake threads every time (docs/performance.md, "Hashing, session
// 6"). They block nothing else: only the hash workers make them.
func mapReadOnly(fd int, off int64, n int) ([]byte, error) {
	p, err := unix.MmapPtr(fd, off, nil, uintptr(n), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// populate asks the kernel to map every page of m at once (MADV_POPULATE_READ).
func populate(m []byte) {
	unix.RawSyscall(unix.SYS_MADVISE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), unix.MADV_POPULATE_READ)
}

// dropPages unmaps the pages of m from the address space but keeps the mapping
// (MADV_DONTNEED): the file's pages stay in the page cache and a later touch maps them again.
func dropPages(m []byte) {
	unix.RawSyscall(unix.SYS_MADVISE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), unix.MADV_DONTNEED)
}

// unmap unmaps a mapping of mapReadOnly.
func unmap(m []byte) {
	unix.RawSyscall(unix.SYS_MUNMAP, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), 0)
}
