// Package parallel runs the calls of a loop on several goroutines, for the ork packages' kernels and
// stages: items [0, n) handed out one at a time, in turn, to a bounded set of goroutines of which the
// caller's is one (For, ForWorker, ForErr), or a range cut into contiguous pieces of a given length,
// one goroutine each (Split).
//
// Every function returns when every call it made has returned. None of them decides the order in
// which items run, nor which goroutine runs which item: a loop whose results must not depend on the
// number of cores makes each item's result depend on the item alone (the kernels' sums run in the
// same order whoever runs them). A panic in a call is not recovered: it ends the process, as it
// would in any goroutine.
package parallel

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
)

// Workers returns the goroutines a loop of n items runs on at the most with workers = GOMAXPROCS:
// min(n, GOMAXPROCS), and at least 1 (for sizing per-goroutine scratch before ForWorker).
func Workers(n int) int { return max(1, min(n, runtime.GOMAXPROCS(0))) }

// For calls f(i) once for every i in [0, n), on min(workers, n) goroutines (the caller's among them),
// each taking the next i in turn. With workers < 2, or n < 2, every call runs on the caller's
// goroutine, in order.
func For(n, workers int, f func(i int)) {
	ForWorker(n, workers, func(_, i int) { f(i) })
}

// ForWorker is For with the number w of the goroutine that makes the call passed to f, for scratch
// of its own: w is in [0, min(workers, n)), and the caller's goroutine is 0. No two calls with the
// same w run at once.
func ForWorker(n, workers int, f func(w, i int)) {
	workers = min(workers, n)
	if workers < 2 {
		for i := range n {
			f(0, i)
		}
		return
	}
	var next atomic.Int64
	work := func(w int) {
		for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
			f(w, i)
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(w)
		}()
	}
	work(0)
	wg.Wait()
}

// ForErr is ForWorker for calls that can fail: once a call has returned an error, no goroutine starts
// another (calls already running finish). It returns the errors joined, at most one a goroutine, in
// the order of w; nil when every call made returned nil.
func ForErr(n, workers int, f func(w, i int) error) error {
	errs := make([]error, max(1, min(workers, n)))
	var failed atomic.Bool
	ForWorker(n, workers, func(w, i int) {
		if failed.Load() {
			return
		}
		if err := f(w, i); err != nil {
			errs[w] = err
			failed.Store(true)
		}
	})
	return errors.Join(errs...)
}

// Split cuts [0, n) into pieces of step values, the last one shorter when step does not divide n,
// and calls f(lo, hi) for each piece [lo, hi) on a goroutine of its own, the first piece on the
// caller's. The caller chooses step for the number of goroutines it wants (ceil(n / workers), or a
// multiple of a kernel's width). It panics when step < 1 and n > 0.
func Split(n, step int, f func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if step < 1 {
		panic("parallel.Split: step < 1")
	}
	var wg sync.WaitGroup
	for lo := step; lo < n; lo += step {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, min(lo+step, n))
		}()
	}
	f(0, min(step, n))
	wg.Wait()
}
