package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// TestOnceGroup: concurrent callers of one key run fn once and all get its value and error; a later
// caller gets the remembered result without running fn; a waiter whose context ends gives up with
// ctx.Err() while the run goes on; another key runs on its own.
func TestOnceGroup(t *testing.T) {
	var g onceGroup[string, int]
	var runs atomic.Int32
	release := make(chan struct{})
	boom := errors.New("boom")
	fn := func() (int, error) {
		runs.Add(1)
		<-release
		return 7, boom
	}
	started := make(chan struct{})
	var first struct {
		v   int
		ran bool
		err error
	}
	go func() {
		close(started)
		first.v, first.ran, first.err = g.do(context.Background(), "k", fn)
		release <- struct{}{} // signals the run ended (release is unbuffered: read below)
	}()
	<-started
	// Wait until the first call holds the key.
	for {
		g.mu.Lock()
		_, ok := g.calls["k"]
		g.mu.Unlock()
		if ok {
			break
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if v, ran, err := g.do(ctx, "k", fn); v != 0 || ran || !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled waiter: %d, %v, %v", v, ran, err)
	}
	var wg sync.WaitGroup
	results := make([]error, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, ran, err := g.do(context.Background(), "k", fn)
			if v != 7 || ran {
				err = errors.New("wrong result")
			}
			results[i] = err
		}()
	}
	release <- struct{}{} // let the run finish
	<-release             // the first caller returned
	wg.Wait()
	if first.v != 7 || !first.ran || first.err != boom {
		t.Fatalf("first caller: %+v", first)
	}
	for i, err := range results {
		if err != boom {
			t.Errorf("waiter %d: %v, want the run's error", i, err)
		}
	}
	if v, ran, err := g.do(context.Background(), "k", fn); v != 7 || ran || err != boom {
		t.Errorf("later caller: %d, %v, %v", v, ran, err)
	}
	if runs.Load() != 1 {
		t.Errorf("fn ran %d times for one key, want 1", runs.Load())
	}
	if v, ran, err := g.do(context.Background(), "other", func() (int, error) { return 3, nil }); v != 3 || !ran || err != nil {
		t.Errorf("another key: %d, %v, %v", v, ran, err)
	}
}
