package calib

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/model"
	"orkpipe/ork/quant"
)

// directRouting counts routing from what every model.Observer sees, without the RouteObserver hook: the
// rows each expert's gate/up input gets (ObserveExpert) are its lookups, and the weights come from
// recomputing llama's routing (model.Route) on the router input (Observe of model.InputRouter) with the
// router weight read from the model.
type directRouting struct {
	m      *model.Model
	counts map[int][]int64
	mass   map[int][]float64
	tokens map[int]int64
	err    error
}

func (d *directRouting) Observe(layer int, in model.Input, x []float32) {
	if in != model.InputRouter || d.err != nil {
		return
	}
	c := &d.m.Cfg
	router, ok, err := d.m.Src.Linear(context.Background(), fmt.Sprintf("blk.%d.ffn_gate_inp.weight", layer))
	if err != nil || !ok {
		d.err = fmt.Errorf("router of layer %d: %v (found %v)", layer, err, ok)
		return
	}
	t := len(x) / c.NEmbd
	logits := make([]float32, t*c.NExpert)
	if d.err = router.Apply(logits, x); d.err != nil {
		return
	}
	if d.mass[layer] == nil {
		d.mass[layer], d.counts[layer] = make([]float64, c.NExpert), make([]int64, c.NExpert)
	}
	sel, w := make([]int, c.NExpertUsed), make([]float32, c.NExpertUsed)
	for tt := 0; tt < t; tt++ {
		model.Route(logits[tt*c.NExpert:(tt+1)*c.NExpert], sel, w)
		for j, e := range sel {
			d.mass[layer][e] += float64(w[j])
		}
	}
	d.tokens[layer] += int64(t)
}

func (d *directRouting) ObserveExpert(layer int, in model.Input, e int, x []float32) {
	if in == model.InputGateUp {
		d.counts[layer][e] += int64(len(x) / d.m.Cfg.NEmbd)
	}
}

// TestRoutingCounts: the routing Capture records equals a direct count from the forward pass (lookups per
// expert from the rows each expert sees, masses from recomputing the routing weights), countRouting
// gives the same bits, and two chained windows merge to the one-window routing.
func TestRoutingCounts(t *testing.T) {
	ctx := context.Background()
	m, seqs := moeModel(t, -1)
	c := m.Cfg
	src, err := NewEmbeddingSource(m, seqs)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Capture(ctx, m, Window{Start: 0, End: 2}, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Routing == nil {
		t.Fatal("Capture of an MoE window recorded no routing")
	}
	got := *res.Routing
	ref := &directRouting{m: m, counts: map[int][]int64{}, mass: map[int][]float64{}, tokens: map[int]int64{}}
	runAllLayers(t, m, seqs, ref)
	if ref.err != nil {
		t.Fatal(ref.err)
	}
	total := int64(len(seqs) * len(seqs[0]))
	if got.Experts != c.NExpert || got.Used != c.NExpertUsed || len(got.Layers) != c.NLayer {
		t.Fatalf("routing %d experts top-%d over %d layers, want %d top-%d over %d", got.Experts, got.Used, len(got.Layers), c.NExpert, c.NExpertUsed, c.NLayer)
	}
	for _, l := range got.Layers {
		if l.Tokens != total || ref.tokens[l.Layer] != total {
			t.Fatalf("layer %d: %d tokens (direct %d), want %d", l.Layer, l.Tokens, ref.tokens[l.Layer], total)
		}
		if !reflect.DeepEqual(l.Counts, ref.counts[l.Layer]) {
			t.Errorf("layer %d: counts %v, direct count %v", l.Layer, l.Counts, ref.counts[l.Layer])
		}
		for e := range l.Mass {
			if l.Mass[e] != ref.mass[l.Layer][e] {
				t.Errorf("layer %d expert %d: mass %v, direct %v", l.Layer, e, l.Mass[e], ref.mass[l.Layer][e])
			}
		}
		t.Logf("layer %d: counts %v, mass %.4f", l.Layer, l.Counts, l.Mass)
	}
	if got.Lookups() != total*int64(c.NExpertUsed)*int64(c.NLayer) {
		t.Errorf("Lookups %d, want %d", got.Lookups(), total*int64(c.NExpertUsed)*int64(c.NLayer))
	}

	counted, err := countRouting(ctx, m, seqs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(counted, got) {
		t.Errorf("countRouting %+v\nCapture %+v", counted, got)
	}

	dir := t.TempDir()
	captureToFile(t, m, Window{Start: 0, End: 1}, src2(t, m, seqs), filepath.Join(dir, "a.1"))
	a, err := Capture(ctx, m, Window{Start: 0, End: 1}, src2(t, m, seqs), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Capture(ctx, m, Window{Start: 1, End: 2}, openHidden(t, filepath.Join(dir, "a.1")), nil)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := MergeRouting(*b.Routing, *a.Routing)
	if err != nil {
		t.Fatal(err)
	}
	for i := range merged.Layers {
		if !reflect.DeepEqual(merged.Layers[i].Counts, got.Layers[i].Counts) {
			t.Errorf("chained windows, layer %d: counts %v, one window %v", i, merged.Layers[i].Counts, got.Layers[i].Counts)
		}
	}
	if _, err := MergeRouting(*a.Routing, *a.Routing); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "layer 0 after 0") {
		t.Errorf("merging a layer twice: %v", err)
	}
}

func src2(t *testing.T, m *model.Model, seqs [][]int32) HiddenSource {
	s, err := NewEmbeddingSource(m, seqs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRoutingZeroRouter: with an all-zero router every token goes to experts 0 and 1 with weight 1/2 each.
func TestRoutingZeroRouter(t *testing.T) {
	m, seqs := moeModel(t, 1)
	r, err := countRouting(context.Background(), m, seqs)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(len(seqs) * len(seqs[0]))
	l := r.Layers[1]
	if !reflect.DeepEqual(l.Counts, []int64{total, total, 0, 0}) || l.Mass[0] != float64(total)/2 || l.Mass[2] != 0 {
		t.Fatalf("zero router: counts %v mass %v, want [%d %d 0 0] and %d/2 each", l.Counts, l.Mass, total, total, total)
	}
	if s := l.TopShare(0.25); s != 0.5 {
		t.Errorf("top 25%% share %v, want 0.5 (expert 0 serves half the lookups)", s)
	}
}

func TestTopShare(t *testing.T) {
	for _, tc := range []struct {
		counts []int64
		frac   float64
		want   float64
	}{
		{[]int64{10, 0, 30, 60}, 0.1, 0.6},  // ceil(0.4) = 1 expert
		{[]int64{10, 0, 30, 60}, 0.5, 0.9},  // 2 experts
		{[]int64{10, 0, 30, 60}, 1, 1},      // all
		{[]int64{10, 0, 30, 60}, 0, 0},      // none
		{[]int64{0, 0, 0, 0}, 0.5, 0},       // nothing routed
		{[]int64{5, 5, 5, 5, 5}, 0.1, 0.2},  // uniform: 1 of 5
		{[]int64{5, 5, 5, 5, 5}, 0.41, 0.6}, // ceil(2.05) = 3
	} {
		if got := topShare(tc.counts, tc.frac); got != tc.want {
			t.Errorf("topShare(%v, %v) = %v, want %v", tc.counts, tc.frac, got, tc.want)
		}
	}
	r := Routing{Experts: 2, Used: 1, Layers: []LayerRouting{
		{Layer: 0, Tokens: 10, Counts: []int64{9, 1}, Mass: []float64{9, 1}},
		{Layer: 3, Tokens: 10, Counts: []int64{5, 5}, Mass: []float64{5, 5}}}}
	if got := r.TopShare(0.25); got != 0.45 {
		t.Errorf("overall top 25%% (1 of 4 experts): %v, want 9/20", got)
	}
	if r.Count(3, 1) != 5 || r.Count(2, 0) != 0 || r.Count(0, 2) != 0 {
		t.Error("Count answers wrong")
	}
}

func validRouting() Routing {
	return Routing{Experts: 3, Used: 2, Layers: []LayerRouting{
		{Layer: 1, Tokens: 4, Counts: []int64{4, 3, 1}, Mass: []float64{2.5, 1.25, 0.25}},
		{Layer: 2, Tokens: 4, Counts: []int64{0, 4, 4}, Mass: []float64{0, 2, 2}}}}
}

// TestRoutingFile: the canonical bytes round-trip; every broken invariant is refused naming it.
func TestRoutingFile(t *testing.T) {
	r := validRouting()
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseRouting(b, "r.json")
	if err != nil || !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip: %v %+v", err, back)
	}
	if b2, _ := back.Marshal(); string(b2) != string(b) {
		t.Fatal("Marshal is not canonical")
	}
	edit := func(f func(r *Routing)) Routing {
		c := validRouting()
		f(&c)
		return c
	}
	for name, tc := range map[string]struct {
		r    Routing
		want string
	}{
		"no experts":     {edit(func(r *Routing) { r.Experts = 0 }), "n_expert 0"},
		"top-k too big":  {edit(func(r *Routing) { r.Used = 4 }), "n_expert_used 4"},
		"layer order":    {edit(func(r *Routing) { r.Layers[1].Layer = 1 }), "layer 1 after 1"},
		"negative layer": {edit(func(r *Routing) { r.Layers[0].Layer = -1 }), "layer -1"},
		"short counts":   {edit(func(r *Routing) { r.Layers[0].Counts = r.Layers[0].Counts[:2] }), "2 counts and 3 masses"},
		"sum":            {edit(func(r *Routing) { r.Layers[0].Counts[2] = 0 }), "counts sum to 7, want tokens × n_expert_used = 4 × 2"},
		"count > tokens": {edit(func(r *Routing) { r.Layers[0].Counts = []int64{5, 2, 1} }), "count 5"},
		"negative count": {edit(func(r *Routing) { r.Layers[0].Counts = []int64{9, 0, -1} }), "count 9"},
		"mass":           {edit(func(r *Routing) { r.Layers[1].Mass[0] = -1 }), "mass -1"},
		"tokens differ":  {edit(func(r *Routing) { r.Layers[1].Tokens, r.Layers[1].Counts = 2, []int64{0, 2, 2} }), "layer 2 saw 2 tokens, layer 1 saw 4"},
	} {
		if _, err := tc.r.Marshal(); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrFormat with %q", name, err, tc.want)
		}
	}
	for name, tc := range map[string]struct{ data, want string }{
		"unknown field": {`{"n_expert":1,"n_expert_used":1,"layers":[],"extra":1}`, "unknown field"},
		"trailing":      {`{"n_expert":1,"n_expert_used":1,"layers":[]} {}`, "data after"},
		"no layers":     {`{"n_expert":1,"n_expert_used":1}`, "no layers"},
		"not json":      {`routing`, "invalid character"},
	} {
		if _, err := ParseRouting([]byte(tc.data), "bad.json"); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "bad.json") {
			t.Errorf("%s: err = %v, want ErrFormat naming bad.json with %q", name, err, tc.want)
		}
	}
}

// TestRouteCounterRefuses: a selection that repeats an expert, leaves the range or has the wrong top-k is
// an error, not a count.
func TestRouteCounterRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		k   int
		sel []int
	}{
		"repeat": {2, []int{1, 1}},
		"range":  {2, []int{0, 3}},
		"top-k":  {1, []int{0}},
	} {
		c := NewRouteCounter(3, 2)
		c.ObserveRoute(0, tc.k, tc.sel, make([]float32, len(tc.sel)))
		if _, err := c.Routing(); !errors.Is(err, ErrShape) {
			t.Errorf("%s: %v, want ErrShape", name, err)
		}
	}
}

// FuzzParseRouting: any bytes either fail with ErrFormat or give a routing that validates and whose
// canonical bytes parse back to it. Seeds: testdata/fuzz/FuzzParseRouting (TestRoutingFuzzSeed -update).
func FuzzParseRouting(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRouting(b, "fuzz")
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		c, err := r.Marshal()
		if err != nil {
			t.Fatalf("parsed routing does not marshal: %v", err)
		}
		back, err := ParseRouting(c, "canonical")
		if err != nil || !reflect.DeepEqual(back, r) {
			t.Fatalf("canonical form does not parse back: %v", err)
		}
	})
}

func TestRoutingFuzzSeed(t *testing.T) {
	b, err := validRouting().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "fuzz", "FuzzParseRouting", "valid")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b) {
		t.Fatalf("seed %s is stale or missing (run with -update): %v", path, err)
	}
}

// rowCounter counts the rows each expert's gate/up input gets: the lookups, as any ExpertObserver sees them.
type rowCounter struct {
	nEmbd  int
	counts map[int]map[int]int64
}

func (r *rowCounter) Observe(int, model.Input, []float32) {}

func (r *rowCounter) ObserveExpert(layer int, in model.Input, e int, x []float32) {
	if in != model.InputGateUp {
		return
	}
	if r.counts[layer] == nil {
		r.counts[layer] = map[int]int64{}
	}
	r.counts[layer][e] += int64(len(x) / r.nEmbd)
}

// TestRoutingLFM2MoE: on llama.cpp's lfm2moe layout (sigmoid router with an expert bias, two leading
// dense blocks) countRouting reports exactly the MoE blocks, with the lookups each expert's rows show.
func TestRoutingLFM2MoE(t *testing.T) {
	ctx := context.Background()
	m, tok, gf, err := model.OpenGGUF(ctx, testfiles.Path(t, "tiny-lfm2moe.gguf"), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer gf.Close()
	text, err := os.ReadFile(testfiles.Path(t, "tinystories_sample.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(string(text), true, false)
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := Sequences(ids, 4, 64, tok.Vocab().BOS)
	if err != nil {
		t.Fatal(err)
	}
	r, err := countRouting(ctx, m, seqs)
	if err != nil {
		t.Fatal(err)
	}
	var layers []int
	for _, l := range r.Layers {
		layers = append(layers, l.Layer)
	}
	if r.Experts != 8 || r.Used != 2 || !reflect.DeepEqual(layers, []int{2, 3, 4, 5}) {
		t.Fatalf("routing: %d experts top-%d, layers %v; want 8 top-2 over the MoE blocks [2 3 4 5]", r.Experts, r.Used, layers)
	}
	ref := &rowCounter{nEmbd: m.Cfg.NEmbd, counts: map[int]map[int]int64{}}
	runAllLayers(t, m, seqs, ref)
	for _, l := range r.Layers {
		for e, c := range l.Counts {
			if c != ref.counts[l.Layer][e] {
				t.Errorf("layer %d expert %d: %d lookups, its rows say %d", l.Layer, e, c, ref.counts[l.Layer][e])
			}
		}
		t.Logf("layer %d: counts %v, top 25%% of experts serve %.3f", l.Layer, l.Counts, l.TopShare(0.25))
	}
}

// runAllLayers runs the sequences through every block of m in one batch (as Capture does when they fit one
// chunk, so the results agree bit for bit), showing obs every site.
func runAllLayers(t *testing.T, m *model.Model, seqs [][]int32, obs model.Observer) {
	t.Helper()
	ctx := context.Background()
	if len(seqs) > chunkSeqs(&m.Cfg, len(seqs[0])) {
		t.Fatalf("%d sequences of %d do not fit one chunk", len(seqs), len(seqs[0]))
	}
	defer quant.SingleThreadedBLAS()() // as Capture: under -tags blas its products run in per-core panels
	var h []float32
	for _, s := range seqs {
		x, err := m.Embed(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		h = append(h, x...)
	}
	for l := 0; l < m.Cfg.NLayer; l++ {
		ly, err := model.LoadLayer(ctx, &m.Cfg, m.Src, l)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.RunLayerBatch(ctx, ly, h, len(seqs[0]), obs); err != nil {
			t.Fatal(err)
		}
	}
}
