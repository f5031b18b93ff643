package stages

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"orkpipe/internal/hugebuf"
)

// Buffers that the nodes of one process hand on to the nodes after them (rtn-tile's tiled codes,
// verify-local's entries). On a host where the first touch of a page is expensive (a PVM guest:
// ~35 µs a fault, and memory the Go runtime returns to the OS comes back fresh), a buffer of tens
// of MiB allocated anew for every weight costs more in faults than the work done in it; taken from
// here, its pages are already resident. The pool's buffers are anonymous mappings of their own,
// outside the Go heap (so that the idle ones do not raise the collector's heap goal, and the
// runtime's scavenger never returns their pages), advised for transparent huge pages (one fault per
// 2 MiB where the kernel has them to give): internal/hugebuf's, which also count them against the
// process's soft memory limit while they are mapped.
//
// Memory: --mem bounds the declared peaks of the nodes running at once. A node holding a pooled
// buffer stays inside its own declaration: each caller bounds the capacity it accepts (getBuffer's
// maxCap) by what its declared peak counts for that buffer. The idle buffers, between the node that
// released them and the one that takes them, are the one part of a build's memory that no running
// node declares: the pool holds at most SetBufferPoolLimit's bytes of them (the build command sets a
// sixteenth of its budget, at most 256 MiB), the same kind of slack as the garbage the Go runtime
// keeps between collections. With the limit 0 (the default: tests, other commands, child
// processes) nothing is pooled and getBuffer allocates on the Go heap.
var pool = bufPool{mapped: map[*byte]mapping{}}

// writeBufSize is the size of a bufio.Writer for about n bytes of output: n, at least 4 KiB and at
// most 1 MiB (a small node output does not take a 1 MiB buffer of garbage; a large one is written
// in 1 MiB pieces).
func writeBufSize(n int64) int { return int(min(max(n, 4<<10), 1<<20)) }

type bufPool struct {
	mu     sync.Mutex
	idle   [][]byte          // idle buffers, capacity ascending
	bytes  int64             // their capacities summed
	limit  int64             // the most idle bytes kept
	mapped map[*byte]mapping // every mapping getBuffer handed out and not unmapped, by its first byte
}

// mapping is a buffer of the pool's: its capacity and the function that unmaps it.
type mapping struct {
	size int
	free func()
}

// SetBufferPoolLimit sets the most idle bytes the process keeps for later nodes (0: none, and
// getBuffer allocates on the Go heap; idle buffers over a lowered limit are unmapped).
func SetBufferPoolLimit(bytes int64) {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	pool.limit = max(0, bytes)
	pool.trim(0)
}

// getBuffer returns a zeroed buffer of length n: the smallest idle one whose capacity is in
// [n, maxCap], or a new one of capacity max(n, min(want, maxCap)) rounded up to whole huge pages
// within maxCap — want lets a caller size a buffer for a later, larger use (rtn-tile sizes its codes
// buffer for the whole entry verify-local reads). Give it back with putBuffer.
func getBuffer(n, want, maxCap int) ([]byte, error) {
	maxCap = max(n, maxCap)
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if pool.limit == 0 {
		return make([]byte, n, max(n, min(want, maxCap))), nil
	}
	for i, b := range pool.idle {
		if c := cap(b); c >= n && c <= maxCap {
			pool.idle = slices.Delete(pool.idle, i, i+1)
			pool.bytes -= int64(c)
			b = b[:n]
			clear(b)
			return b, nil
		}
	}
	size := max(n, min(want, maxCap))
	if up := (size + hugebuf.Min - 1) &^ (hugebuf.Min - 1); up <= maxCap { // whole huge pages
		size = up
	}
	if size == 0 {
		return nil, nil
	}
	m, free, err := hugebuf.Alloc[byte](size)
	if err != nil {
		return nil, fmt.Errorf("a pooled buffer of %d bytes: %w", size, err)
	}
	m = m[:size:size] // a mapping's capacity is whole huge pages; the pool counts what it asked for
	if size >= hugebuf.Min {
		pool.mapped[unsafe.SliceData(m)] = mapping{size, free}
	} // else heap memory (a buffer under a huge page), left to the collector by putBuffer
	return m[:n], nil
}

// putBuffer hands b, from getBuffer, to later nodes; the caller must not use it afterwards. Smaller
// idle buffers are unmapped to make room for it; b is unmapped when they do not make enough. A
// buffer getBuffer did not map (nil, or allocated on the heap) is left to the collector.
func putBuffer(b []byte) {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	b = b[:cap(b)]
	m, ok := pool.mapped[unsafe.SliceData(b)]
	if !ok || m.size != len(b) {
		return
	}
	c := m.size
	pool.trim(int64(c))
	if pool.bytes+int64(c) > pool.limit {
		pool.unmap(b)
		return
	}
	i, _ := slices.BinarySearchFunc(pool.idle, c, func(x []byte, c int) int { return cap(x) - c })
	pool.idle = slices.Insert(pool.idle, i, b[:0])
	pool.bytes += int64(c)
}

// trim unmaps the smallest idle buffers, each smaller than room, until room more bytes fit the
// limit or no such buffer is left (room 0: until the idle ones fit).
func (p *bufPool) trim(room int64) {
	for len(p.idle) > 0 && p.bytes+room > p.limit && (room == 0 || int64(cap(p.idle[0])) < room) {
		p.bytes -= int64(cap(p.idle[0]))
		p.unmap(p.idle[0])
		p.idle = p.idle[1:]
	}
}

// unmap releases a mapping of getBuffer's.
func (p *bufPool) unmap(b []byte) {
	k := unsafe.SliceData(b)
	m, ok := p.mapped[k]
	if !ok {
		panic(fmt.Sprintf("unmapping a pooled buffer of %d bytes the pool did not map", cap(b))) // the pool's own bookkeeping is wrong
	}
	delete(p.mapped, k)
	m.free()
}
