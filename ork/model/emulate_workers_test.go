package model

import (
	"context"
	"runtime"
	"testing"

	"orkpipe/ork/pack"
)

// TestEmulationWorkersIndependentOfCPUs: the scratch a node declares for an emulated entry
// (EmulationBytes with workers 0) is the same whatever GOMAXPROCS the planning process has, and an
// Apply run with more CPUs than that (GOMAXPROCS 4·EmulationWorkers) allocates no more than the figure
// a one-CPU planner computed (with the matmul's small per-call values, 64 KiB): an entry of K = KP =
// 1024 (one Hadamard block), 1024 rows, on 2048 tokens, so rotating, quantizing and multiplying each
// would run on every CPU. EmulationBytes counted GOMAXPROCS workers, and an Apply ran on GOMAXPROCS.
func TestEmulationWorkersIndependentOfCPUs(t *testing.T) {
	const k, n, group, tokens = 1024, 1024, 32, 2048
	w := pack.Weight{Meta: pack.Meta{Name: "blk.0.ffn_up.weight", DType: pack.I8Rot, K: k, N: n, Group: group, ActBits: 8,
		Rotation: pack.Rotation{Kind: pack.RotHadamard, Block: k, Seed: 3}}, Codes: make([]int8, n*k), Scales: make([]float32, n*k/group)}
	for i := range w.Codes {
		w.Codes[i] = int8(i%255 - 127)
	}
	for i := range w.Scales {
		w.Scales[i] = 1
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	one, ok := EmulationBytes(w.Meta, tokens, 0)
	if !ok {
		t.Fatal("EmulationBytes overflows")
	}
	many := 4 * EmulationWorkers
	runtime.GOMAXPROCS(many)
	if got, _ := EmulationBytes(w.Meta, tokens, 0); got != one {
		t.Errorf("EmulationBytes on %d tokens: %d bytes at GOMAXPROCS %d, %d at GOMAXPROCS 1: a declaration depends on the planner's CPUs", tokens, got, many, one)
	}
	e, err := NewEmulated(context.Background(), w, k)
	if err != nil {
		t.Fatal(err)
	}
	alloc := firstApplyAlloc(t, e, tokens)
	t.Logf("first Apply on %d tokens at GOMAXPROCS %d: %d bytes allocated; EmulationBytes %d (at GOMAXPROCS 1)", tokens, many, alloc, one)
	if alloc > uint64(one)+64<<10 {
		t.Errorf("first Apply at GOMAXPROCS %d allocated %d bytes, more than the %d EmulationBytes declares (computed at GOMAXPROCS 1)", many, alloc, one)
	}
}
