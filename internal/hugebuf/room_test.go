package hugebuf

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

var sink []byte

func heapObjectBytes(t *testing.T) int64 {
	t.Helper()
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatalf("runtime metric %s missing", heapObjects)
	}
	return int64(s[0].Value.Uint64())
}

// TestMakeRoom checks that MakeRoom collects exactly when the heap's objects, garbage included, and
// the bytes asked for would pass the memory limit, and that the collection frees the garbage.
func TestMakeRoom(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // only the limit and MakeRoom collect
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	if MakeRoom(1 << 40) {
		t.Fatal("collected without a memory limit")
	}
	runtime.GC()
	base := heapObjectBytes(t)
	sink = make([]byte, 64<<20)
	for i := range sink {
		sink[i] = byte(i)
	}
	sink = nil // 64 MiB of garbage the collector has not seen
	if got := heapObjectBytes(t); got < base+64<<20 {
		t.Fatalf("heap objects %d after 64 MiB allocated on %d", got, base)
	}
	debug.SetMemoryLimit(base + 96<<20)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gcs := ms.NumGC
	if MakeRoom(16 << 20) {
		t.Fatal("collected with room for 16 MiB under the limit")
	}
	if !MakeRoom(48 << 20) {
		t.Fatal("did not collect when 64 MiB of garbage and 48 MiB asked for pass the limit")
	}
	runtime.ReadMemStats(&ms)
	if ms.NumGC == gcs {
		t.Fatal("MakeRoom reported a collection the runtime did not count")
	}
	if got := heapObjectBytes(t); got > base+16<<20 {
		t.Fatalf("heap objects %d after the collection, want about %d: the garbage is still there", got, base)
	}
	if MakeRoom(48 << 20) {
		t.Fatal("collected again with the garbage gone")
	}
}
