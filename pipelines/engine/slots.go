package engine

import (
	"context"
	"slices"
	"sync"
)

// rank orders nodes waiting for a job slot: the one with the longer chain of nodes after it (level)
// first, then the one declaring more memory (a proxy for the larger job: started earlier, it leaves
// the small ones to fill the cores at the end), then the earlier in the plan. A node on the longest
// chain of a build thus never waits behind one that could run beside the chain's later nodes (the
// stub of an RTN build runs beside the pack's writing instead of beside the quantization).
type rank struct {
	level int
	mem   int64
	index int
}

func (a rank) before(b rank) bool {
	if a.level != b.level {
		return a.level > b.level
	}
	if a.mem != b.mem {
		return a.mem > b.mem
	}
	return a.index < b.index
}

// levels returns, for each node of a plan (nodes in dependency order: a node's dependents come
// after it), 1 + the length of the longest chain of its dependents.
func levels(nodes []*pnode) []int {
	l := make([]int, len(nodes))
	for i := len(nodes) - 1; i >= 0; i-- {
		l[i] = 1
		for _, d := range nodes[i].dependents {
			l[i] = max(l[i], l[d]+1)
		}
	}
	return l
}

// slots hands out n job slots; a freed slot goes to the waiting node of the first rank.
type slots struct {
	mu   sync.Mutex
	free int
	wait []*slotWaiter
}

type slotWaiter struct {
	r     rank
	ready chan struct{} // closed when the slot is handed over
}

func newSlots(n int) *slots { return &slots{free: n} }

// acquire takes a slot, waiting behind the waiters of an earlier rank; it returns ctx's error, holding
// nothing, if ctx ends first.
func (s *slots) acquire(ctx context.Context, r rank) error {
	s.mu.Lock()
	if s.free > 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	w := &slotWaiter{r: r, ready: make(chan struct{})}
	s.wait = append(s.wait, w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if i := slices.Index(s.wait, w); i >= 0 {
		s.wait = slices.Delete(s.wait, i, i+1)
		s.mu.Unlock()
		return ctx.Err()
	}
	s.mu.Unlock()
	s.release() // handed over while ctx ended: pass it on
	return ctx.Err()
}

// release frees a slot: to the waiter of the first rank, if any.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.wait) == 0 {
		s.free++
		return
	}
	best := 0
	for i, w := range s.wait {
		if w.r.before(s.wait[best].r) {
			best = i
		}
	}
	w := s.wait[best]
	s.wait = slices.Delete(s.wait, best, best+1)
	close(w.ready)
}
