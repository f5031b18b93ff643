package engine

import (
	"context"
	"sync"
)

// onceGroup runs a function once per key and gives every caller of that key its result: the
// single-flight pattern of BuildKit's flightcontrol, except that a result is kept for the group's
// lifetime (one build pass), so later callers get it too. The zero value is ready to use.
type onceGroup[K comparable, V any] struct {
	mu    sync.Mutex
	calls map[K]*onceCall[V]
}

type onceCall[V any] struct {
	done chan struct{}
	val  V
	err  error
}

// do returns key's result: the first caller of key runs fn (ran is true for it, and it waits for
// nothing); every other caller waits until that run ends and gets the same value and error, or
// gives up when its ctx ends (err is then ctx.Err()).
func (g *onceGroup[K, V]) do(ctx context.Context, key K, fn func() (V, error)) (v V, ran bool, err error) {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = map[K]*onceCall[V]{}
	}
	c, ok := g.calls[key]
	if !ok {
		c = &onceCall[V]{done: make(chan struct{})}
		g.calls[key] = c
	}
	g.mu.Unlock()
	if !ok {
		c.val, c.err = fn()
		close(c.done)
		return c.val, true, c.err
	}
	select {
	case <-c.done:
		return c.val, false, c.err
	case <-ctx.Done():
		var zero V
		return zero, false, ctx.Err()
	}
}
