package hugebuf

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
)

func TestMakeSmallOnHeap(t *testing.T) {
	b, free := Make[float32](100)
	if len(b) != 100 {
		t.Fatalf("len %d, want 100", len(b))
	}
	for i := range b {
		b[i] = float32(i)
	}
	free()
	free()
	if b[99] != 99 { // a heap slice stays usable
		t.Fatalf("b[99] = %v", b[99])
	}
}

func TestMakeLargeZeroedWritable(t *testing.T) {
	for _, n := range []int{Min / 8, Min/8 + 1, 3*Min/8 + 5} {
		b, free := Make[float64](n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("n %d: len %d cap %d", n, len(b), cap(b))
		}
		for i, v := range b {
			if v != 0 {
				t.Fatalf("n %d: b[%d] = %v, want 0", n, i, v)
			}
			b[i] = float64(i)
		}
		for i, v := range b {
			if v != float64(i) {
				t.Fatalf("n %d: b[%d] = %v", n, i, v)
			}
		}
		free()
		free() // the second call does nothing
	}
}

// TestMakeMemoryLimit checks that a mapped buffer lowers a set memory limit by its mapped size while
// held, and leaves an unset one alone.
func TestMakeMemoryLimit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("buffers are mapped on Linux only")
	}
	old := debug.SetMemoryLimit(1 << 40)
	defer debug.SetMemoryLimit(old)
	_, free := Make[byte](Min + 1) // two huge pages
	if got := debug.SetMemoryLimit(-1); got != 1<<40-2*Min {
		t.Errorf("limit while held %d, want %d", got, 1<<40-2*Min)
	}
	free()
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Errorf("limit after free %d, want %d", got, int64(1<<40))
	}
	free()
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Errorf("limit after a second free %d, want %d", got, int64(1<<40))
	}
	release := Reserve(1 << 30)
	if got := debug.SetMemoryLimit(-1); got != 1<<40-1<<30 {
		t.Errorf("limit while reserved %d, want %d", got, int64(1<<40-1<<30))
	}
	release()
	release()
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Errorf("limit after the reservation %d, want %d", got, int64(1<<40))
	}
	debug.SetMemoryLimit(math.MaxInt64)
	_, free = Make[byte](Min)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("unset limit became %d", got)
	}
	free()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("unset limit became %d after free", got)
	}
}
