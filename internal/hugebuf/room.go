package hugebuf

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// heapObjects is the runtime metric of the bytes in heap objects: live ones and dead ones the
// collector has not yet freed.
const heapObjects = "/memory/classes/heap/objects:bytes"

// MakeRoom runs the garbage collector now, and returns once it has finished, when the heap's objects
// (live and not yet collected) and n more bytes would pass the process's soft memory limit; without
// a limit, or with room, it does nothing. It reports whether it collected.
//
// Call it before allocating n bytes in a few large pieces (a build node about to read its Hessian,
// a buffer of Make). The collector starts only after an allocation finds the heap past its goal, so
// one large allocation on a heap that still holds the previous node's garbage puts both in memory at
// once, past the limit by up to the allocation's size; and near the limit, with the CPU contended,
// the collector's CPU limiter lets the heap pass the limit rather than collect at once. Collecting
// first keeps the limit a bound for the large allocations that decide the peak. The cost is one
// collection (milliseconds for a heap of large pointer-free buffers).
func MakeRoom(n int64) bool {
	lim := debug.SetMemoryLimit(-1)
	if lim == math.MaxInt64 || n <= 0 {
		return false
	}
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return false // a runtime without the metric: the collector paces as before
	}
	if objects := int64(s[0].Value.Uint64()); objects <= lim-n {
		return false
	}
	runtime.GC()
	return true
}
