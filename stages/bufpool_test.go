package stages

import (
	"testing"
	"unsafe"
)

// TestBufferPool: with a limit, a buffer given back is handed out again (zeroed) to a request it fits
// within maxCap, a request it exceeds maxCap for gets a new one, the idle bytes stay within the limit
// (the smaller buffers unmapped first), and a heap buffer is never taken in; without a limit every
// buffer comes from the heap and nothing is kept.
func TestBufferPool(t *testing.T) {
	SetBufferPoolLimit(8 << 20)
	defer SetBufferPoolLimit(0)
	get := func(n, want, maxCap int) []byte {
		t.Helper()
		b, err := getBuffer(n, want, maxCap)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != n {
			t.Fatalf("getBuffer(%d, %d, %d): length %d", n, want, maxCap, len(b))
		}
		for i, c := range b {
			if c != 0 {
				t.Fatalf("getBuffer(%d, %d, %d): byte %d is %#x, want a zeroed buffer", n, want, maxCap, i, c)
			}
		}
		return b
	}
	a := get(3<<20, 3<<20, 6<<20)
	if cap(a) != 4<<20 {
		t.Fatalf("a new buffer for 3 MiB (at most 6): capacity %d, want whole huge pages (4 MiB)", cap(a))
	}
	for i := range a {
		a[i] = 0xa5
	}
	putBuffer(a)
	if b := get(1<<20, 1<<20, 2<<20); unsafe.SliceData(b) == unsafe.SliceData(a) {
		t.Fatal("a 4 MiB buffer went to a request of at most 2 MiB")
	} else {
		putBuffer(b)
	}
	b := get(3<<20, 3<<20, 6<<20)
	if unsafe.SliceData(b) != unsafe.SliceData(a) {
		t.Fatal("the idle 4 MiB buffer was not reused for a request it fits")
	}
	c := get(6<<20, 6<<20, 6<<20)
	putBuffer(b) // idle: 2 + 4 MiB
	putBuffer(c) // 6 MiB more: the 2 MiB buffer goes, then the 4 MiB one
	if pool.bytes != 6<<20 || len(pool.idle) != 1 || cap(pool.idle[0]) != 6<<20 {
		t.Fatalf("idle after putting 2, 4 and 6 MiB under a limit of 8: %d bytes in %d buffers, want the 6 MiB one", pool.bytes, len(pool.idle))
	}
	putBuffer(make([]byte, 1<<20))
	if pool.bytes != 6<<20 {
		t.Fatalf("a heap buffer was taken in: %d idle bytes", pool.bytes)
	}
	SetBufferPoolLimit(0)
	if pool.bytes != 0 || len(pool.idle) != 0 || len(pool.mapped) != 0 {
		t.Fatalf("limit 0: %d idle bytes in %d buffers, %d mappings left", pool.bytes, len(pool.idle), len(pool.mapped))
	}
	h := get(1<<20, 1<<20, 1<<20)
	putBuffer(h)
	if len(pool.idle) != 0 || len(pool.mapped) != 0 {
		t.Fatal("limit 0: a buffer was mapped or kept")
	}
}
