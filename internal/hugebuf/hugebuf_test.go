package hugebuf

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"orkpipe/internal/testfiles"
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
		testfiles.SkipBuild(t, "buffers are mapped on Linux only")
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

// TestMakeSparse: a sparse buffer is zeroed and writable like Make's; on Linux its mapping is advised
// against huge pages (smaps' VmFlags nh, Make's hg), and two pages touched far apart in 16 MiB back
// two 4 KiB pages, not two huge pages.
func TestMakeSparse(t *testing.T) {
	b, free := MakeSparse[byte](16 << 20)
	defer free()
	for _, i := range []int{0, 8<<20 + 5} {
		if b[i] != 0 {
			t.Fatalf("b[%d] = %d, want 0", i, b[i])
		}
		b[i] = 7
	}
	if small, free := MakeSparse[byte](100); len(small) != 100 {
		t.Fatalf("a small sparse buffer: len %d", len(small))
	} else {
		free()
	}
	if runtime.GOOS != "linux" {
		return
	}
	rss, flags := mappingOf(t, unsafe.Pointer(&b[0]))
	if !slices.Contains(flags, "nh") || rss > 64 {
		t.Errorf("sparse mapping: Rss %d kB, VmFlags %v; want nh and two 4 KiB pages", rss, flags)
	}
	h, freeH := Make[byte](4 << 20)
	defer freeH()
	h[0] = 1
	if _, flags := mappingOf(t, unsafe.Pointer(&h[0])); !slices.Contains(flags, "hg") {
		t.Errorf("Make's mapping: VmFlags %v, want hg", flags)
	}
}

// mappingOf returns the Rss (kB) and VmFlags of the mapping of /proc/self/smaps that holds p.
func mappingOf(t *testing.T, p unsafe.Pointer) (int, []string) {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	addr := uint64(uintptr(p))
	in, rss := false, 0
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && !strings.HasSuffix(f[0], ":") {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && a <= addr && addr < b
			continue
		}
		switch {
		case in && f[0] == "Rss:":
			rss, _ = strconv.Atoi(f[1])
		case in && f[0] == "VmFlags:":
			return rss, f[1:]
		}
	}
	t.Fatalf("no mapping of /proc/self/smaps holds %#x", addr)
	return 0, nil
}
