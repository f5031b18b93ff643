package tile

import (
	"runtime"

	"orkpipe/ork/internal/parallel"
)

// parallelMinBytes is the layout size below which tiling stays on the caller's goroutine: smaller
// weights tile in well under a millisecond, less than the cost of starting workers.
const parallelMinBytes = 1 << 20

// maxWorkers, when positive, caps walkParallel's goroutines (benchmarks set 1 for the serial
// baseline of the same run).
var maxWorkers int

// walkParallel visits the same runs as walk, each exactly once, split by blocks of rows over at
// most GOMAXPROCS goroutines (a bounded pool pulling blocks from a counter). Runs of different
// rows never share a byte, so fn may write its run's bytes without locking, but anything else it
// touches must be safe for concurrent use. It returns when every run was visited.
func (l Layout) walkParallel(fn func(n, k0, off int)) {
	rows, unit := l.walkRowCount(), l.walkRowUnit()
	units := (rows + unit - 1) / unit
	workers := min(runtime.GOMAXPROCS(0), units, l.Size()/parallelMinBytes)
	if maxWorkers > 0 {
		workers = min(workers, maxWorkers)
	}
	if workers <= 1 {
		l.walk(fn)
		return
	}
	blocks := min(units, 8*workers) // several blocks per worker evens out uneven progress
	per := (units + blocks - 1) / blocks
	parallel.For((rows+per*unit-1)/(per*unit), workers, func(b int) {
		n0 := b * per * unit
		l.walkRows(fn, n0, min(n0+per*unit, rows))
	})
}
