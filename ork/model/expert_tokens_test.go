package model

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
)

// applyLog wraps a WeightSource and records the most tokens one Apply of each Linear took.
type applyLog struct {
	WeightSource
	mu   sync.Mutex
	most map[string]int
}

func (a *applyLog) Linear(ctx context.Context, name string) (Linear, bool, error) {
	l, ok, err := a.WeightSource.Linear(ctx, name)
	if err != nil || !ok {
		return l, ok, err
	}
	return &loggedLinear{Linear: l, name: name, log: a}, true, nil
}

type loggedLinear struct {
	Linear
	name string
	log  *applyLog
}

func (l *loggedLinear) Apply(y, x []float32) error {
	_, k := l.Dims()
	l.log.mu.Lock()
	l.log.most[l.name] = max(l.log.most[l.name], len(x)/k)
	l.log.mu.Unlock()
	return l.Linear.Apply(y, x)
}

func (l *loggedLinear) rowIndependent() bool { return isRowIndependent(l.Linear) }

// TestEvalExpertTokens evaluates chunks of the lfm2moe fixture with every routed expert slice an
// emulated pack entry (int8 rotated) and records the tokens of each Apply: an expert's Apply takes the
// tokens of several chunks at once (runMoESeqs), more than ctx, and never more than
// Config.EvalExpertTokens for the chunks evaluated, which is at most their tokens (it counted
// min(moeSeqs, EvalGroupChunks) chunks whatever the evaluation ran: 112,864 tokens at ctx 32, where 4
// chunks hold 128); every other weight's takes ctx. CheckEmulationMemory, given a budget that
// covers the expert entries' scratch on ctx tokens but not on EvalExpertTokens, refuses the pack naming
// an expert entry and the tokens: it counted ctx tokens for every entry, and let an expert's Apply
// run past the budget.
func TestEvalExpertTokens(t *testing.T) {
	ctx := context.Background()
	f, err := gguf.Open(ctx, testfiles.Path(t, "tiny-lfm2moe.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := ConfigFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	src := NewGGUFSource(f, 64<<20)
	schemes := map[string]scheme{}
	for name, sc := range expertSchemes(cfg, scheme{dtype: pack.I8Rot, group: 32, rotate: true}) {
		if _, _, ok := src.Shape(name); ok { // lfm2moe's leading blocks are dense
			schemes[name] = sc
		}
	}
	if len(schemes) == 0 {
		t.Fatal("tiny-lfm2moe.gguf: no expert slices")
	}
	ps, p := testPackSource(t, src, schemes)
	log := &applyLog{WeightSource: ps, most: map[string]int{}}
	m, err := NewModel(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	const n, chunks = 32, 4
	tokens := func(c int, dst []int32) {
		for i := range dst {
			dst[i] = int32((c*131 + i*17 + i*i) % cfg.NVocab)
		}
	}
	if err := forEachChunk(ctx, []evalModel{{m: m}}, chunks, n, tokens, func(int, [][]float32) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	bound := cfg.EvalExpertTokens(n, 1, chunks)
	if bound > chunks*n {
		t.Errorf("EvalExpertTokens(%d, 1, %d) = %d, more than the %d tokens of the %d chunks evaluated", n, chunks, bound, chunks*n, chunks)
	}
	if any := cfg.EvalExpertTokens(n, 1, 0); any < bound {
		t.Errorf("EvalExpertTokens(%d, 1, 0) = %d (any number of chunks), less than for %d chunks, %d", n, any, chunks, bound)
	}
	expertMost := 0
	for name, most := range log.most {
		if _, _, expert := pack.SplitExpert(name); expert {
			expertMost = max(expertMost, most)
			if most > bound {
				t.Errorf("%s: an Apply of %d tokens, EvalExpertTokens(%d, 1, %d) = %d", name, most, n, chunks, bound)
			}
		} else if most > n {
			t.Errorf("%s (not a routed expert): an Apply of %d tokens, more than ctx %d", name, most, n)
		}
	}
	t.Logf("ctx %d, %d chunks: the largest expert Apply took %d tokens; EvalExpertTokens %d", n, chunks, expertMost, bound)
	if expertMost <= n {
		t.Fatalf("no expert Apply took more than ctx %d tokens (at most %d): the test does not run runMoESeqs", n, expertMost)
	}

	var budget int64 // the most any entry needs on ctx tokens
	var name string
	for _, e := range p.Entries() {
		need, ok := EmulationBytes(e.Meta, n, 0)
		if !ok {
			t.Fatalf("%s: EmulationBytes overflows", e.Name)
		}
		if need > budget {
			budget, name = need, e.Name
		}
	}
	err = ps.CheckEmulationMemory(n, bound, budget)
	t.Logf("budget %d bytes (%s on %d tokens): %v", budget, name, n, err)
	if !errors.Is(err, ErrOverBudget) || !strings.Contains(err.Error(), fmt.Sprintf("on %d tokens at once", bound)) || !strings.Contains(err.Error(), "#") {
		t.Errorf("CheckEmulationMemory(%d, %d, %d) = %v, want ErrOverBudget naming an expert entry on %d tokens", n, bound, budget, err, bound)
	}
	if err := ps.CheckEmulationMemory(n, n, budget); err != nil {
		t.Errorf("CheckEmulationMemory(%d, %d, %d): %v, want nil (the budget covers every entry on ctx tokens)", n, n, budget, err)
	}
}
