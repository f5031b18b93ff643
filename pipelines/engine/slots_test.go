package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestSlotsRankOrder: with every slot taken, freed slots go to the waiters by rank (more estimated
// work after the node first, then the longer chain of nodes after it, then more declared memory,
// then plan order), not in the order they came; a waiter whose context ends leaves the queue, and
// the slot count is right afterwards.
func TestSlotsRankOrder(t *testing.T) {
	s := newSlots(2)
	ctx := context.Background()
	for range 2 {
		if err := s.acquire(ctx, rank{}); err != nil {
			t.Fatal(err)
		}
	}
	waiters := []rank{
		{level: 1, mem: 900, index: 0},        // the stub: a short chain
		{level: 3, mem: 100, index: 1},        // a small weight on the long chain
		{level: 3, mem: 500, index: 2},        // a big weight on the long chain
		{level: 3, mem: 500, index: 3},        // its twin, later in the plan
		{level: 2, mem: 9999, index: 4},       // a middle chain
		{tail: 5, level: 1, mem: 1, index: 5}, // the least of all but for the work after it
		{tail: 5, level: 2, mem: 1, index: 6}, // as much work after it, on a longer chain
	}
	got := make(chan int, len(waiters))
	cctx, cancel := context.WithCancel(ctx)
	canceled := make(chan error, 1)
	go func() { canceled <- s.acquire(cctx, rank{level: 9, index: 9}) }()
	queued(t, s, 1)
	for i, r := range waiters {
		go func() {
			if err := s.acquire(ctx, r); err != nil {
				t.Error(err)
			}
			got <- i
		}()
		queued(t, s, i+2)
	}
	cancel()
	if err := <-canceled; err == nil {
		t.Fatal("a waiter whose context ended got a slot")
	}
	queued(t, s, len(waiters))
	var order []int
	for range waiters {
		s.release()
		order = append(order, <-got)
	}
	if want := []int{6, 5, 2, 3, 1, 4, 0}; !slices.Equal(order, want) {
		t.Errorf("slots handed over in order %v, want %v", order, want)
	}
	// Each release handed its slot over: two are held (by the last two waiters); releasing them leaves
	// two free.
	s.release()
	s.release()
	if s.free != 2 || len(s.wait) != 0 {
		t.Fatalf("after every release: %d free, %d waiting; want 2 and 0", s.free, len(s.wait))
	}
}

// queued waits until n waiters are queued.
func queued(t *testing.T, s *slots, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		l := len(s.wait)
		s.mu.Unlock()
		if l == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued, want %d", l, n)
		}
	}
}

// TestLevels: a node's level is one more than the longest chain of its dependents (RTN's shape: the
// weights feed the pack, which feeds the verification with the stub; the report follows).
func TestLevels(t *testing.T) {
	// 0, 1: weights -> 2: pack -> 4: verify -> 5: report; 3: stub -> 4; 6: a lone node.
	deps := [][]int{0: {2}, 1: {2}, 2: {4}, 3: {4}, 4: {5}, 5: nil, 6: nil}
	nodes := make([]*pnode, len(deps))
	for i, d := range deps {
		nodes[i] = &pnode{dependents: d}
	}
	if got, want := levels(nodes), []int{4, 4, 3, 3, 2, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("levels %v, want %v", got, want)
	}
}

// TestTails: a node's tail is the costliest chain of its dependents, their own costs summed along
// it and its own left out (the RTN shape of TestLevels, the stub with a long sha256 after it).
func TestTails(t *testing.T) {
	// 0, 1: weights -> 2: pack -> 4: verify -> 5: report; 3: stub -> 4, and -> 7: its sha256;
	// 6: a lone node.
	deps := [][]int{0: {2}, 1: {2}, 2: {4}, 3: {4, 7}, 4: {5}, 5: nil, 6: nil, 7: nil}
	costs := []int64{100, 50, 40, 10, 20, 1, 1000, 80}
	nodes := make([]*pnode, len(deps))
	for i, d := range deps {
		nodes[i] = &pnode{node: &Node{cost: costs[i]}, dependents: d}
	}
	// verify 21 after the pack; pack + verify + report 61 after a weight; the stub: max(21, 80).
	if got, want := tails(nodes), []int64{61, 61, 21, 80, 1, 0, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("tails %v, want %v", got, want)
	}
	for i := range nodes {
		nodes[i].node.cost = 0
	}
	if got := tails(nodes); slices.ContainsFunc(got, func(v int64) bool { return v != 0 }) {
		t.Errorf("tails without costs %v, want all 0 (the level decides)", got)
	}
}

// TestNodeCost: a negative cost is a graph error.
func TestNodeCost(t *testing.T) {
	g := NewGraph()
	g.Add("a", "demo-source", nil, nil).Cost(-1)
	if err := g.Err(); !errors.Is(err, ErrGraph) {
		t.Fatalf("negative cost: err %v, want ErrGraph", err)
	}
}
