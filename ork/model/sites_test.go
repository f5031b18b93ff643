package model

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/pack"
)

// siteNames lists the names of the sites of a layer, marking expert sites with "*".
func siteNames(c *Config, l int) []string {
	var out []string
	for _, s := range c.Sites(l) {
		n := s.Name
		if s.Experts > 0 {
			n += "*"
		}
		out = append(out, n)
	}
	return out
}

func TestSitesLlama(t *testing.T) {
	dense := Config{Arch: "llama", NEmbd: 64, NFF: 96, NLayer: 2, NHead: 4, NHeadKV: 2, HeadDim: 16, NVocab: 40}
	moe := moeConfig()
	for _, c := range []struct {
		name  string
		cfg   Config
		want  []string
		width []int
	}{
		{"dense", dense, []string{"attn_qkv", "attn_output", "ffn_gate_up", "ffn_down"}, []int{64, 64, 64, 96}},
		{"moe", moe, []string{"attn_qkv", "attn_output", "ffn_gate_up_exps*", "ffn_down_exps*", "ffn_gate_inp"}, []int{64, 64, 64, 64, 64}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			if got := siteNames(&cfg, 1); !slices.Equal(got, c.want) {
				t.Errorf("sites %v, want %v", got, c.want)
			}
			for i, s := range cfg.Sites(1) {
				if s.Width != c.width[i] {
					t.Errorf("site %s: width %d, want %d", s.Name, s.Width, c.width[i])
				}
			}
			if cfg.Sites(0)[InputQKV].Name != "attn_qkv" || cfg.Sites(0)[InputAttnO].Name != "attn_output" {
				t.Errorf("the shared positions moved: %v", siteNames(&cfg, 0))
			}
			if !cfg.MoE() {
				for in := Input(0); in < NumInputs; in++ { // the deprecated llama names agree with Sites
					s := cfg.Sites(0)[in]
					var ws []string
					for _, w := range s.Weights {
						ws = append(ws, w.Name)
					}
					if s.Name != in.String() || s.Width != in.Width(&cfg) || !slices.Equal(ws, in.Weights()) {
						t.Errorf("site %d: %+v, Input methods say %s %d %v", in, s, in, in.Width(&cfg), in.Weights())
					}
				}
			}
		})
	}
}

func TestSiteOf(t *testing.T) {
	dense := Config{Arch: "llama", NEmbd: 64, NFF: 96, NLayer: 4, NHead: 4, NHeadKV: 2, HeadDim: 16, NVocab: 40}
	moe := moeConfig()
	for _, c := range []struct {
		cfg    *Config
		tensor string
		layer  int
		in     Input
		n      int
		ok     bool
	}{
		{&dense, "blk.3.attn_k.weight", 3, InputQKV, 32, true},
		{&dense, "blk.0.attn_output.weight", 0, InputAttnO, 64, true},
		{&dense, "blk.2.ffn_up.weight", 2, InputGateUp, 96, true},
		{&dense, "blk.1.ffn_down.weight", 1, InputDown, 64, true},
		{&dense, "blk.4.ffn_down.weight", 0, 0, 0, false},  // no such layer
		{&dense, "blk.01.ffn_down.weight", 0, 0, 0, false}, // not canonical
		{&dense, "blk.1.attn_norm.weight", 0, 0, 0, false},
		{&dense, "output.weight", 0, 0, 0, false},
		{&dense, "blk.1.ffn_down.weight#0", 0, 0, 0, false},
		{&moe, "blk.1.ffn_gate_exps.weight#3", 1, InputGateUp, 64, true},
		{&moe, "blk.0.ffn_down_exps.weight#0", 0, InputDown, 64, true},
		{&moe, "blk.0.ffn_down_exps.weight#4", 0, 0, 0, false}, // 4 experts
		{&moe, "blk.0.ffn_down_exps.weight", 0, 0, 0, false},   // the whole tensor is not a Linear
		{&moe, "blk.1.ffn_gate_inp.weight", 1, InputRouter, 4, true},
		{&moe, "blk.1.ffn_gate.weight", 0, 0, 0, false},
	} {
		l, in, w, ok := c.cfg.SiteOf(c.tensor)
		if ok != c.ok || (ok && (l != c.layer || in != c.in || w.N != c.n)) {
			t.Errorf("SiteOf(%s) = %d, %d, %+v, %v; want %d, %d, N %d, %v", c.tensor, l, in, w, ok, c.layer, c.in, c.n, c.ok)
		}
	}
}

// TestSitesMatchLoadLayer checks that every weight a site lists is the Linear LoadLayer loads, with the
// rows the site says and the site's width as K.
func TestSitesMatchLoadLayer(t *testing.T) {
	for _, file := range []string{"stories260K.gguf", "tiny-qwen35.gguf", "tiny-lfm2moe.gguf"} {
		m, _, f, err := OpenGGUF(context.Background(), testfiles.Path(t, file), 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		src := m.Src.(*GGUFSource)
		for l := 0; l < m.Cfg.NLayer; l++ {
			for _, s := range m.Cfg.Sites(l) {
				for _, w := range s.Weights {
					name := s.Tensor(l, w)
					if s.Experts > 0 {
						name += "#0"
					}
					k, n, ok := src.Shape(name)
					if !ok || k != s.Width || n != w.N {
						t.Errorf("%s: %s is %d rows of %d (ok %v), the site says %d of %d", file, name, n, k, ok, w.N, s.Width)
					}
				}
			}
		}
	}
}

// rowwise applies a Linear one row at a time, so its result for a row never depends on the other rows
// (gonum's Sgemm sums differently for different row counts).
type rowwise struct{ Linear }

func (r rowwise) Apply(y, x []float32) error {
	n, k := r.Dims()
	if err := checkApply(y, x, n, k); err != nil {
		return err
	}
	for t := 0; t < len(x)/k; t++ {
		if err := r.Linear.Apply(y[t*n:(t+1)*n], x[t*k:(t+1)*k]); err != nil {
			return err
		}
	}
	return nil
}

// rowwiseSource wraps every Linear of a WeightSource in rowwise.
type rowwiseSource struct{ WeightSource }

func (s rowwiseSource) Linear(ctx context.Context, name string) (Linear, bool, error) {
	l, ok, err := s.WeightSource.Linear(ctx, name)
	if !ok || err != nil {
		return l, ok, err
	}
	return rowwise{l}, true, nil
}

// recordObserver keeps a copy of every observed site's rows, by (layer, site, expert); expert -1 for
// sites that are not per expert.
type recordObserver map[string][]float32

func (r recordObserver) Observe(layer int, in Input, x []float32) {
	k := fmt.Sprint(layer, int(in), -1)
	r[k] = append(r[k], x...)
}

func (r recordObserver) ObserveExpert(layer int, in Input, e int, x []float32) {
	k := fmt.Sprint(layer, int(in), e)
	r[k] = append(r[k], x...)
}

// TestRunLayerBatch runs S sequences as one batch and one at a time: with row-independent matrix
// products the hidden states agree bit for bit (positions restart and attention stays within each
// sequence), and the batch observer sees each site once with every sequence's rows in order.
func TestRunLayerBatch(t *testing.T) {
	ctx := context.Background()
	for name, open := range blockKindModels() {
		t.Run(name, func(t *testing.T) {
			m := open(t)
			m.Src = rowwiseSource{m.Src}
			text, err := os.ReadFile(testfiles.Path(t, "stories-generated.txt"))
			if err != nil {
				t.Fatal(err)
			}
			const nSeq, seqLen = 3, 40
			toks := make([]int32, nSeq*seqLen)
			for i := range toks {
				toks[i] = int32(text[i]) % int32(m.Cfg.NVocab)
			}
			batch, err := m.Embed(ctx, toks)
			if err != nil {
				t.Fatal(err)
			}
			single := slices.Clone(batch)
			e := m.Cfg.NEmbd
			for l := 0; l < m.Cfg.NLayer; l++ {
				ly, err := LoadLayer(ctx, &m.Cfg, m.Src, l)
				if err != nil {
					t.Fatal(err)
				}
				bo, so := recordObserver{}, recordObserver{}
				if err := m.RunLayerBatch(ctx, ly, batch, seqLen, bo); err != nil {
					t.Fatal(err)
				}
				for s := 0; s < nSeq; s++ {
					if err := m.RunLayer(ctx, ly, single[s*seqLen*e:(s+1)*seqLen*e], so); err != nil {
						t.Fatal(err)
					}
				}
				for i := range batch {
					if math.Float32bits(batch[i]) != math.Float32bits(single[i]) {
						t.Fatalf("layer %d: value %d (sequence %d) batch %v, one at a time %v", l, i, i/(seqLen*e), batch[i], single[i])
					}
				}
				if len(bo) != len(so) {
					t.Fatalf("layer %d: the batch observed %d sites, one at a time %d", l, len(bo), len(so))
				}
				for k, v := range bo {
					if isExpertKey(k) {
						if len(v) != len(so[k]) {
							t.Errorf("layer %d: expert site %s: the batch saw %d values, the sequences %d", l, k, len(v), len(so[k]))
						}
					} else if !slices.Equal(v, so[k]) {
						t.Errorf("layer %d: site %s: the batch saw other rows than the sequences did", l, k)
					}
				}
				sites := m.Cfg.Sites(l)
				for i, s := range sites {
					if s.Experts > 0 {
						continue
					}
					if got := len(bo[fmt.Sprint(l, i, -1)]); got != nSeq*seqLen*s.Width {
						t.Errorf("layer %d: site %s: observed %d values, want %d", l, s.Name, got, nSeq*seqLen*s.Width)
					}
				}
			}
		})
	}
}

// isExpertKey reports a recordObserver key of an expert site: its rows group by expert over the whole
// batch, so they come in another order than sequence by sequence.
func isExpertKey(k string) bool {
	var l, in, e int
	fmt.Sscan(k, &l, &in, &e)
	return e >= 0
}

// TestBatchScratchBytes runs every block of the fixtures on a batch and checks that the scratch the
// model then keeps is what BatchScratchBytes declares.
func TestBatchScratchBytes(t *testing.T) {
	ctx := context.Background()
	for name, open := range blockKindModels() {
		m := open(t)
		const nSeq, seqLen = 3, 50
		h := embedded(t, m, nSeq*seqLen, 13)
		for l := 0; l < m.Cfg.NLayer; l++ {
			ly, err := LoadLayer(ctx, &m.Cfg, m.Src, l)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.RunLayerBatch(ctx, ly, h, seqLen, nil); err != nil {
				t.Fatal(err)
			}
		}
		var held int64
		for _, b := range m.buf.f {
			held += 4 * int64(cap(b))
		}
		held += 8 * int64(cap(m.buf.sel)+cap(m.buf.routed))
		if want := m.Cfg.BatchScratchBytes(nSeq, seqLen); held != want {
			t.Errorf("%s: the model keeps %d bytes of scratch, BatchScratchBytes says %d", name, held, want)
		}
	}
}

// embedded returns the token embeddings of n tokens i·step mod n_vocab.
func embedded(t *testing.T, m *Model, n, step int) []float32 {
	t.Helper()
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(i * step % m.Cfg.NVocab)
	}
	h, err := m.Embed(context.Background(), toks)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// inputRecorder wraps every Linear of a source and keeps the input of its last Apply, by weight name.
type inputRecorder struct {
	WeightSource
	seen map[string][]float32
}

type recordingLinear struct {
	Linear
	name string
	seen map[string][]float32
}

func (r recordingLinear) Apply(y, x []float32) error {
	r.seen[r.name] = append([]float32(nil), x...)
	return r.Linear.Apply(y, x)
}

func (s inputRecorder) Linear(ctx context.Context, name string) (Linear, bool, error) {
	l, ok, err := s.WeightSource.Linear(ctx, name)
	if !ok || err != nil {
		return l, ok, err
	}
	return recordingLinear{l, name, s.seen}, true, nil
}

// TestSitesSeeWhatWeightsRead runs one batch through every block and checks the sites against the
// forward pass itself: every weight a site lists read exactly the rows the Observer reported for the
// site (per expert slice for expert sites), and every matmul weight the block applied is listed.
func TestSitesSeeWhatWeightsRead(t *testing.T) {
	ctx := context.Background()
	for name, o := range blockKindModels() {
		t.Run(name, func(t *testing.T) {
			m := o(t)
			rec := inputRecorder{m.Src, map[string][]float32{}}
			m.Src = rec
			const seqLen = 24
			h := embedded(t, m, 2*seqLen, 29)
			for l := 0; l < m.Cfg.NLayer; l++ {
				ly, err := LoadLayer(ctx, &m.Cfg, m.Src, l)
				if err != nil {
					t.Fatal(err)
				}
				clear(rec.seen)
				obs := recordObserver{}
				if err := m.RunLayerBatch(ctx, ly, h, seqLen, obs); err != nil {
					t.Fatal(err)
				}
				listed := map[string]bool{}
				for i, s := range m.Cfg.Sites(l) {
					for _, w := range s.Weights {
						tensor := s.Tensor(l, w)
						for e := 0; e < max(1, s.Experts); e++ {
							name, key := tensor, fmt.Sprint(l, i, -1)
							if s.Experts > 0 {
								name, key = pack.ExpertName(tensor, e), fmt.Sprint(l, i, e)
							}
							listed[name] = true
							got, read := rec.seen[name]
							if s.Experts > 0 && !read && obs[key] == nil {
								continue // no token routed to this expert
							}
							if !read || !slices.Equal(got, obs[key]) {
								t.Errorf("block %d: %s read %d values, site %s was observed with %d (read %v)", l, name, len(got), s.Name, len(obs[key]), read)
							}
						}
					}
				}
				for name := range rec.seen {
					if !listed[name] {
						t.Errorf("block %d: %s was applied but no site lists it", l, name)
					}
				}
			}
		})
	}
}

// blockKindModels opens, by name, test models that together have every block kind: stories260K
// (attention, dense FFN), tiny-qwen35 (DeltaNet, gated attention), tiny-lfm2moe (short conv, attention
// with q/k norms, sigmoid-routed MoE) and a generated llama MoE model (softmax routing).
func blockKindModels() map[string]func(t *testing.T) *Model {
	return map[string]func(t *testing.T) *Model{
		"stories260K": func(t *testing.T) *Model { return openShared(t, "stories260K.gguf") },
		"qwen35":      func(t *testing.T) *Model { return openShared(t, "tiny-qwen35.gguf") },
		"lfm2moe":     func(t *testing.T) *Model { return openShared(t, "tiny-lfm2moe.gguf") },
		"llama-moe": func(t *testing.T) *Model {
			path, _ := writeMoEModel(t, moeConfig(), 3, 1)
			m, _ := openMoE(t, path)
			return m
		},
	}
}

// openShared opens a shared test model as a float Model over a GGUFSource.
func openShared(t *testing.T, file string) *Model {
	m, _, f, err := OpenGGUF(context.Background(), testfiles.Path(t, file), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return m
}
