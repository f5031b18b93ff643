package engine

import (
	"context"
	"slices"
	"sync"
)

// rank orders nodes waiting for a job slot: the one after which more estimated work must follow
// (tail: the costliest chain of its dependents, Node.Cost summed along it) first, then the one with
// the longer chain of nodes after it (level), then the one declaring more memory (a proxy for the
// larger job: started earlier, it leaves the small ones to fill the cores at the end), then the
// earlier in the plan. The tail leaves out the node's own cost: what it decides is which node to
// finish first so that the long work behind it can start, and a node's own work is done whenever
// it runs. In an RTN build the stub (cheap to write, a long sha256 after it) thus runs beside the
// first weights, and its sha256 (nothing after it) beside the pack's writing, once the weights are
// done; with no cost declared, every tail is 0 and the level decides.
type rank struct {
	tail  int64
	level int
	mem   int64
	index int
}

func (a rank) before(b rank) bool {
	if a.tail != b.tail {
		return a.tail > b.tail
	}
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

// tails returns, for each node of a plan (in dependency order), the most estimated work that must
// follow it: the largest cost + tail of its dependents, 0 for a node nothing depends on.
func tails(nodes []*pnode) []int64 {
	t := make([]int64, len(nodes))
	for i := len(nodes) - 1; i >= 0; i-- {
		for _, d := range nodes[i].dependents {
			t[i] = max(t[i], nodes[d].node.cost+t[d])
		}
	}
	return t
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
