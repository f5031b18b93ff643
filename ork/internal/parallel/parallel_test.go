package parallel

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestForEveryItemOnce: For and ForWorker call f once for every item whatever n and workers; with
// fewer than two workers or items, in order and as worker 0; w is always below min(workers, n), and
// no two calls with the same w overlap.
func TestForEveryItemOnce(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 1000} {
		for _, workers := range []int{-1, 0, 1, 2, 3, 8, 2000} {
			t.Run(fmt.Sprintf("n%d-w%d", n, workers), func(t *testing.T) {
				calls := make([]atomic.Int32, n)
				busy := make([]atomic.Int32, max(1, min(workers, n)))
				var order []int
				var mu sync.Mutex
				var bad atomic.Value
				ForWorker(n, workers, func(w, i int) {
					if w < 0 || w >= len(busy) {
						bad.Store(fmt.Sprintf("item %d on worker %d, want below %d", i, w, len(busy)))
						return
					}
					if busy[w].Add(1) != 1 {
						bad.Store(fmt.Sprintf("two calls on worker %d at once", w))
					}
					calls[i].Add(1)
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					busy[w].Add(-1)
				})
				if s := bad.Load(); s != nil {
					t.Fatal(s)
				}
				for i := range calls {
					if c := calls[i].Load(); c != 1 {
						t.Fatalf("item %d called %d times", i, c)
					}
				}
				if workers < 2 || n < 2 {
					for i, v := range order {
						if v != i {
							t.Fatalf("serial run: call %d was item %d", i, v)
						}
					}
				}
				var seen atomic.Int64
				For(n, workers, func(i int) { seen.Add(int64(i) + 1) })
				if want := int64(n) * int64(n+1) / 2; seen.Load() != want {
					t.Fatalf("For: items summed to %d, want %d", seen.Load(), want)
				}
			})
		}
	}
}

// TestForRunsAtOnce: with workers = n every item runs at the same time (each waits for all the
// others: fewer goroutines would never finish), and no more than workers - 1 goroutines are started
// (the caller's is one of the workers).
func TestForRunsAtOnce(t *testing.T) {
	const n = 4
	base := runtime.NumGoroutine()
	var arrived sync.WaitGroup
	arrived.Add(n)
	var most atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		ForWorker(n, n, func(w, i int) {
			most.Store(max(most.Load(), int64(runtime.NumGoroutine()-base)))
			arrived.Done()
			arrived.Wait()
		})
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("four items on four workers did not all run at once")
	}
	// base + the test's own goroutine above + workers - 1 started by ForWorker.
	if m := most.Load(); m > n {
		t.Errorf("%d goroutines beyond the test's at once, want at most %d", m, n)
	}
}

// TestForCallerIsWorkerZero: the calls with w = 0 run on the caller's goroutine, the others not.
func TestForCallerIsWorkerZero(t *testing.T) {
	caller := goid()
	var mu sync.Mutex
	ForWorker(200, 3, func(w, i int) {
		if id := goid(); (id == caller) != (w == 0) {
			mu.Lock()
			t.Errorf("item %d: worker %d on goroutine %d, the caller's is %d", i, w, id, caller)
			mu.Unlock()
		}
		time.Sleep(10 * time.Microsecond)
	})
}

// goid is the calling goroutine's number, from its stack trace's first line ("goroutine 7 [...").
func goid() int {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	var id int
	if _, err := fmt.Sscanf(string(buf), "goroutine %d ", &id); err != nil {
		panic(fmt.Sprintf("parsing %q: %v", buf, err))
	}
	return id
}

// TestForErr: after a call fails no goroutine starts another; every failing call's error is in the
// result; no error gives nil.
func TestForErr(t *testing.T) {
	errBad := errors.New("bad item")
	if err := ForErr(100, 3, func(w, i int) error { return nil }); err != nil {
		t.Fatalf("no failure: %v", err)
	}
	if err := ForErr(0, 3, func(w, i int) error { return errBad }); err != nil {
		t.Fatalf("no items: %v", err)
	}
	// Serial: item 5 fails, nothing after it runs.
	var last int
	err := ForErr(100, 1, func(w, i int) error {
		last = i
		if i == 5 {
			return fmt.Errorf("item %d: %w", i, errBad)
		}
		return nil
	})
	if !errors.Is(err, errBad) || last != 5 {
		t.Fatalf("serial: err %v, last item %d, want item 5's error and nothing after", err, last)
	}
	// Every call fails: each goroutine makes one call at the most.
	for _, workers := range []int{2, 3, 8} {
		var calls atomic.Int32
		err := ForErr(1000, workers, func(w, i int) error {
			calls.Add(1)
			return fmt.Errorf("item %d: %w", i, errBad)
		})
		if !errors.Is(err, errBad) {
			t.Fatalf("%d workers: err %v", workers, err)
		}
		if c := calls.Load(); c < 1 || c > int32(workers) {
			t.Fatalf("%d workers: %d calls after failures, want 1 to %d", workers, c, workers)
		}
		if j, ok := err.(interface{ Unwrap() []error }); !ok || len(j.Unwrap()) != int(calls.Load()) {
			t.Fatalf("%d workers: %d calls failed, the result holds %v", workers, calls.Load(), err)
		}
	}
}

// TestSplit: the pieces cover [0, n) once, each step long but the last, the first on the caller's
// goroutine; n <= 0 calls nothing; step < 1 panics.
func TestSplit(t *testing.T) {
	for _, n := range []int{0, 1, 5, 16, 17, 100} {
		for _, step := range []int{1, 4, 16, 100, 1000} {
			cover := make([]atomic.Int32, n)
			var mu sync.Mutex
			var first []int
			Split(n, step, func(lo, hi int) {
				if lo%step != 0 || hi != min(lo+step, n) || lo >= hi {
					t.Errorf("n %d step %d: piece [%d, %d)", n, step, lo, hi)
					return
				}
				mu.Lock()
				first = append(first, lo)
				mu.Unlock()
				for i := lo; i < hi; i++ {
					cover[i].Add(1)
				}
			})
			for i := range cover {
				if c := cover[i].Load(); c != 1 {
					t.Fatalf("n %d step %d: value %d covered %d times", n, step, i, c)
				}
			}
			if want := (n + step - 1) / step; len(first) != want {
				t.Fatalf("n %d step %d: %d pieces, want %d", n, step, len(first), want)
			}
		}
	}
	// The first piece runs on the caller's goroutine, the others not.
	caller := goid()
	Split(3, 1, func(lo, hi int) {
		if id := goid(); (id == caller) != (lo == 0) {
			t.Errorf("piece [%d, %d) on goroutine %d, the caller's is %d", lo, hi, id, caller)
		}
	})
	defer func() {
		if recover() == nil {
			t.Error("Split with step 0 did not panic")
		}
	}()
	Split(3, 0, func(lo, hi int) {})
}

// TestWorkers: min(n, GOMAXPROCS), at least one.
func TestWorkers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	for n, want := range map[int]int{-1: 1, 0: 1, 1: 1, 2: 2, 3: 3, 1000: 3} {
		if got := Workers(n); got != want {
			t.Errorf("Workers(%d) = %d with GOMAXPROCS 3, want %d", n, got, want)
		}
	}
}
