package model

import (
	"context"
	"encoding/binary"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"orkpipe/ork/gguf"
)

// moeConfig is the tiny MoE model of these tests: 2 layers, n_embd 64, 4 experts of n_ff 64, top-2.
func moeConfig() Config {
	return Config{Arch: "llama", NEmbd: 64, NFF: 64, NLayer: 2, NHead: 4, NHeadKV: 2, HeadDim: 16, NVocab: 40,
		RopeDim: 16, RopeBase: 10000, RopeFreqScale: 1, NormEps: 1e-5, NExpert: 4, NExpertUsed: 2}
}

// moeWeights are the generated float weights of the test model, by GGUF tensor name, in GGUF order
// (ne[0] fastest): a 3-D expert tensor [K, N, n_expert] is n_expert matrices of N rows of K values.
type moeWeights map[string][]float32

// moeTensors lists the tensors of a llama-arch MoE model of shape c in file order.
func moeTensors(c Config) []gguf.TensorInfo {
	e, f, v, nx := int64(c.NEmbd), int64(c.NFF), int64(c.NVocab), int64(c.NExpert)
	ts := []gguf.TensorInfo{{Name: "token_embd.weight", Shape: []int64{e, v}}}
	for l := 0; l < c.NLayer; l++ {
		p := "blk." + strconv.Itoa(l) + "."
		ts = append(ts,
			gguf.TensorInfo{Name: p + "attn_norm.weight", Shape: []int64{e}},
			gguf.TensorInfo{Name: p + "attn_q.weight", Shape: []int64{e, int64(c.QDim())}},
			gguf.TensorInfo{Name: p + "attn_k.weight", Shape: []int64{e, int64(c.KVDim())}},
			gguf.TensorInfo{Name: p + "attn_v.weight", Shape: []int64{e, int64(c.KVDim())}},
			gguf.TensorInfo{Name: p + "attn_output.weight", Shape: []int64{int64(c.QDim()), e}},
			gguf.TensorInfo{Name: p + "ffn_norm.weight", Shape: []int64{e}},
			gguf.TensorInfo{Name: p + "ffn_gate_inp.weight", Shape: []int64{e, nx}},
			gguf.TensorInfo{Name: p + "ffn_gate_exps.weight", Shape: []int64{e, f, nx}},
			gguf.TensorInfo{Name: p + "ffn_up_exps.weight", Shape: []int64{e, f, nx}},
			gguf.TensorInfo{Name: p + "ffn_down_exps.weight", Shape: []int64{f, e, nx}},
		)
	}
	return append(ts, gguf.TensorInfo{Name: "output_norm.weight", Shape: []int64{e}}, gguf.TensorInfo{Name: "output.weight", Shape: []int64{e, v}})
}

// writeMoEModel writes a llama-arch MoE GGUF of shape c with F32 weights drawn from seed (router scaled
// by routerScale; 0 makes every router logit equal) and returns its path and the weights.
func writeMoEModel(t testing.TB, c Config, seed uint64, routerScale float64) (string, moeWeights) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	ws := moeWeights{}
	ts := moeTensors(c)
	for i := range ts {
		ts[i].Type = gguf.TypeF32
		w := make([]float32, ts[i].Elements())
		std := 1 / math.Sqrt(float64(ts[i].Shape[0]))
		for j := range w {
			switch {
			case len(ts[i].Shape) == 1:
				w[j] = float32(1 + 0.1*r.NormFloat64())
			case strings.HasSuffix(ts[i].Name, ".ffn_gate_inp.weight"):
				w[j] = float32(routerScale * 4 * std * r.NormFloat64())
			default:
				w[j] = float32(std * r.NormFloat64())
			}
		}
		ws[ts[i].Name] = w
	}
	kv := []gguf.KV{
		{Key: "general.architecture", Value: gguf.String("llama")},
		{Key: "llama.embedding_length", Value: gguf.Uint32(uint32(c.NEmbd))},
		{Key: "llama.feed_forward_length", Value: gguf.Uint32(uint32(c.NFF))},
		{Key: "llama.block_count", Value: gguf.Uint32(uint32(c.NLayer))},
		{Key: "llama.attention.head_count", Value: gguf.Uint32(uint32(c.NHead))},
		{Key: "llama.attention.head_count_kv", Value: gguf.Uint32(uint32(c.NHeadKV))},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: gguf.Float32(c.NormEps)},
		{Key: "llama.expert_count", Value: gguf.Uint32(uint32(c.NExpert))},
		{Key: "llama.expert_used_count", Value: gguf.Uint32(uint32(c.NExpertUsed))},
	}
	path := filepath.Join(t.TempDir(), "moe.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = gguf.Write(context.Background(), f, gguf.Header{KV: kv, Tensors: ts}, func(_ context.Context, _ int, ti gguf.TensorInfo, w io.Writer) error {
		b := make([]byte, 4*len(ws[ti.Name]))
		for i, v := range ws[ti.Name] {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		_, err := w.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, ws
}

// openMoE opens a written MoE model as a float Model over a GGUFSource.
func openMoE(t testing.TB, path string) (*Model, *GGUFSource) {
	t.Helper()
	f, err := gguf.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	cfg, err := ConfigFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	src := NewGGUFSource(f, 64<<20)
	m, err := NewModel(cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	return m, src
}

func TestConfigFromGGUFMoE(t *testing.T) {
	path, _ := writeMoEModel(t, moeConfig(), 1, 1)
	m, _ := openMoE(t, path)
	if want := moeConfig(); m.Cfg.NExpert != want.NExpert || m.Cfg.NExpertUsed != want.NExpertUsed || m.Cfg.NFF != want.NFF || m.Cfg.NVocab != want.NVocab {
		t.Fatalf("config %+v, want %+v", m.Cfg, want)
	}
}

func TestConfigValidateExperts(t *testing.T) {
	for _, tc := range []struct {
		n, used int
		arch    string
		ok      bool
	}{{0, 0, "llama", true}, {4, 2, "llama", true}, {4, 4, "mistral", true}, {4, 0, "llama", false}, {0, 2, "llama", false},
		{2, 3, "llama", false}, {-1, 1, "llama", false}, {4, 2, "qwen3", false}} {
		c := moeConfig()
		c.NExpert, c.NExpertUsed, c.Arch = tc.n, tc.used, tc.arch
		c.RopeNeox = tc.arch == "qwen2" || tc.arch == "qwen3"
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s, %d experts, %d used: error %v, want ok = %v", tc.arch, tc.n, tc.used, err, tc.ok)
		}
	}
}

func TestRoute(t *testing.T) {
	ln := func(x float64) float32 { return float32(math.Log(x)) }
	for _, tc := range []struct {
		name    string
		logits  []float32
		k       int
		sel     []int
		weights []float64
	}{
		// softmax ∝ (3, 1, 2, 1): top-2 = experts 0 and 2, renormalized to 3/5 and 2/5.
		{"hand", []float32{ln(3), 0, ln(2), 0}, 2, []int{0, 2}, []float64{0.6, 0.4}},
		{"all equal", []float32{0, 0, 0, 0}, 2, []int{0, 1}, []float64{0.5, 0.5}},
		{"tie after the best", []float32{1, 5, 1, 5, 1}, 3, []int{1, 3, 0}, nil},
		{"top-1", []float32{-2, -1, -3}, 1, []int{1}, []float64{1}},
		{"all selected", []float32{ln(1), ln(2), ln(5)}, 3, []int{2, 1, 0}, []float64{0.625, 0.25, 0.125}},
	} {
		sel, w := make([]int, tc.k), make([]float32, tc.k)
		Route(tc.logits, sel, w)
		for j := range sel {
			if sel[j] != tc.sel[j] {
				t.Fatalf("%s: selected %v, want %v", tc.name, sel, tc.sel)
			}
			if tc.weights != nil && math.Abs(float64(w[j])-tc.weights[j]) > 1e-6 {
				t.Fatalf("%s: weights %v, want %v", tc.name, w, tc.weights)
			}
		}
		var sum float64
		for _, v := range w {
			sum += float64(v)
		}
		if math.Abs(sum-1) > 1e-6 {
			t.Errorf("%s: weights %v sum to %v", tc.name, w, sum)
		}
	}
}

// recorder keeps what an ExpertObserver sees.
type recorder struct {
	inputs  map[Input][]float32
	experts map[[2]int][]float32 // {input, expert} -> rows
	calls   map[[2]int]int
}

func newRecorder() *recorder {
	return &recorder{inputs: map[Input][]float32{}, experts: map[[2]int][]float32{}, calls: map[[2]int]int{}}
}

func (r *recorder) Observe(_ int, in Input, x []float32) { r.inputs[in] = append([]float32(nil), x...) }

func (r *recorder) ObserveExpert(_ int, in Input, e int, x []float32) {
	r.experts[[2]int{int(in), e}] = append([]float32(nil), x...)
	r.calls[[2]int{int(in), e}]++
}

// matVec64 computes y = W·x for W of n rows of k values (float32 data, float64 arithmetic).
func matVec64(w []float32, n, k int, x []float64) []float64 {
	y := make([]float64, n)
	for i := range y {
		for j := 0; j < k; j++ {
			y[i] += float64(w[i*k+j]) * x[j]
		}
	}
	return y
}

func maxAbsDiff(got []float32, want []float64) (d, scale float64) {
	for i := range want {
		d = max(d, math.Abs(float64(got[i])-want[i]))
		scale = max(scale, math.Abs(want[i]))
	}
	return d, scale
}

// TestMoEBlockMatchesReference runs block 0 of the generated MoE model and recomputes its FFN
// independently in float64 from the generated weights: the ffn_norm of the post-attention state, the
// router (softmax, top-2 by probability, renormalized), the experts' SwiGLU and the weighted sum. The
// experts' observed inputs are checked against the reference routing.
func TestMoEBlockMatchesReference(t *testing.T) {
	c := moeConfig()
	path, ws := writeMoEModel(t, c, 42, 1)
	m, _ := openMoE(t, path)
	ctx := context.Background()
	l, err := LoadLayer(ctx, &m.Cfg, m.Src, 0)
	if err != nil {
		t.Fatal(err)
	}
	const T = 9
	e, f, nx, k := c.NEmbd, c.NFF, c.NExpert, c.NExpertUsed
	r := rand.New(rand.NewPCG(3, 3))
	h := make([]float32, T*e)
	for i := range h {
		h[i] = float32(r.NormFloat64())
	}
	h0 := append([]float32(nil), h...)
	rec := newRecorder()
	if err := m.RunLayer(ctx, l, h, rec); err != nil {
		t.Fatal(err)
	}
	att := rec.inputs[InputAttnO]
	routedRows := map[int][]int{} // expert -> tokens in order
	var worst, scale float64
	for tt := 0; tt < T; tt++ {
		a := make([]float64, c.QDim())
		for i := range a {
			a[i] = float64(att[tt*c.QDim()+i])
		}
		mid := matVec64(ws["blk.0.attn_output.weight"], e, c.QDim(), a)
		var ss float64
		for i := range mid {
			mid[i] += float64(h0[tt*e+i])
			ss += mid[i] * mid[i]
		}
		rs := 1 / math.Sqrt(ss/float64(e)+float64(c.NormEps))
		x := make([]float64, e)
		for i := range x {
			x[i] = mid[i] * rs * float64(ws["blk.0.ffn_norm.weight"][i])
		}
		if d, s := maxAbsDiff(rec.inputs[InputRouter][tt*e:(tt+1)*e], x); d > 1e-5*s {
			t.Fatalf("token %d: ffn_norm output differs from the reference by %g (scale %g)", tt, d, s)
		}
		logits := matVec64(ws["blk.0.ffn_gate_inp.weight"], nx, e, x)
		mx := math.Inf(-1)
		for _, v := range logits {
			mx = max(mx, v)
		}
		var z float64
		p := make([]float64, nx)
		for i, v := range logits {
			p[i] = math.Exp(v - mx)
			z += p[i]
		}
		order := []int{0, 1, 2, 3}
		for i := range order { // by probability descending, index ascending
			for j := i + 1; j < len(order); j++ {
				if p[order[j]] > p[order[i]] {
					order[i], order[j] = order[j], order[i]
				}
			}
		}
		var wsum float64
		for _, x0 := range order[:k] {
			wsum += p[x0] / z
		}
		out := make([]float64, e)
		for _, x0 := range order[:k] {
			routedRows[x0] = append(routedRows[x0], tt)
			gate := matVec64(ws["blk.0.ffn_gate_exps.weight"][x0*f*e:(x0+1)*f*e], f, e, x)
			up := matVec64(ws["blk.0.ffn_up_exps.weight"][x0*f*e:(x0+1)*f*e], f, e, x)
			act := make([]float64, f)
			for i := range act {
				act[i] = gate[i] / (1 + math.Exp(-gate[i])) * up[i]
			}
			row := len(routedRows[x0]) - 1
			if got := rec.experts[[2]int{int(InputDown), x0}]; len(got) < (row+1)*f {
				t.Fatalf("expert %d: down input has %d values, token %d is its row %d", x0, len(got), tt, row)
			} else if d, s := maxAbsDiff(got[row*f:(row+1)*f], act); d > 1e-4*s {
				t.Fatalf("expert %d, token %d: down input differs by %g (scale %g)", x0, tt, d, s)
			}
			down := matVec64(ws["blk.0.ffn_down_exps.weight"][x0*e*f:(x0+1)*e*f], e, f, act)
			for i := range out {
				out[i] += p[x0] / z / wsum * down[i]
			}
		}
		for i := range out {
			out[i] += mid[i]
		}
		d, s := maxAbsDiff(h[tt*e:(tt+1)*e], out)
		worst, scale = max(worst, d), max(scale, s)
	}
	t.Logf("MoE block vs float64 reference: max abs error %.3g (max |h| %.3g); tokens per expert %v", worst, scale, routedRows)
	if worst > 1e-4*scale {
		t.Fatalf("MoE block output differs from the reference by %g (scale %g)", worst, scale)
	}
	rows := 0
	for x0 := 0; x0 < nx; x0++ {
		got := rec.experts[[2]int{int(InputGateUp), x0}]
		want := routedRows[x0]
		if len(got) != len(want)*e {
			t.Fatalf("expert %d observed %d input rows, the reference routes tokens %v to it", x0, len(got)/e, want)
		}
		for r, tt := range want {
			for i := 0; i < e; i++ {
				if got[r*e+i] != rec.inputs[InputRouter][tt*e+i] {
					t.Fatalf("expert %d row %d is not token %d's ffn_norm output", x0, r, tt)
				}
			}
		}
		rows += len(want)
	}
	if rows != T*k {
		t.Fatalf("%d routed rows, want %d tokens x top-%d", rows, T, k)
	}
	if len(routedRows) < 3 {
		t.Errorf("only experts %v receive tokens: the reference exercises too little routing", routedRows)
	}
}

// TestMoERoutingTies: with an all-zero router every expert has the same probability; routing must pick
// experts 0..k-1 for every token (lower index first), give them equal weights, never call the observer
// for the others, and be bit-for-bit repeatable.
func TestMoERoutingTies(t *testing.T) {
	c := moeConfig()
	path, ws := writeMoEModel(t, c, 5, 0)
	m, _ := openMoE(t, path)
	ctx := context.Background()
	l, err := LoadLayer(ctx, &m.Cfg, m.Src, 1)
	if err != nil {
		t.Fatal(err)
	}
	const T = 5
	e, f := c.NEmbd, c.NFF
	r := rand.New(rand.NewPCG(9, 9))
	h := make([]float32, T*e)
	for i := range h {
		h[i] = float32(r.NormFloat64())
	}
	h2 := append([]float32(nil), h...)
	hIn := append([]float32(nil), h...)
	rec := newRecorder()
	if err := m.RunLayer(ctx, l, h, rec); err != nil {
		t.Fatal(err)
	}
	if err := m.RunLayer(ctx, l, h2, nil); err != nil {
		t.Fatal(err)
	}
	for i := range h {
		if math.Float32bits(h[i]) != math.Float32bits(h2[i]) {
			t.Fatalf("value %d: %v then %v: the MoE block is not deterministic", i, h[i], h2[i])
		}
	}
	for x0 := 0; x0 < c.NExpert; x0++ {
		n := rec.calls[[2]int{int(InputGateUp), x0}] + rec.calls[[2]int{int(InputDown), x0}]
		switch {
		case x0 < c.NExpertUsed && (n != 2 || len(rec.experts[[2]int{int(InputGateUp), x0}]) != T*e):
			t.Errorf("expert %d: %d observer calls, %d input rows; want 2 calls and all %d tokens", x0, n, len(rec.experts[[2]int{int(InputGateUp), x0}])/e, T)
		case x0 >= c.NExpertUsed && n != 0:
			t.Errorf("expert %d: receives no token but was observed %d times", x0, n)
		}
	}
	// The FFN output is the mean of experts 0 and 1: check one token against float64.
	x := rec.inputs[InputRouter][:e]
	x64 := make([]float64, e)
	for i, v := range x {
		x64[i] = float64(v)
	}
	want := make([]float64, e)
	for x0 := 0; x0 < 2; x0++ {
		act := make([]float64, f)
		gate := matVec64(ws["blk.1.ffn_gate_exps.weight"][x0*f*e:(x0+1)*f*e], f, e, x64)
		up := matVec64(ws["blk.1.ffn_up_exps.weight"][x0*f*e:(x0+1)*f*e], f, e, x64)
		for i := range act {
			act[i] = gate[i] / (1 + math.Exp(-gate[i])) * up[i]
		}
		down := matVec64(ws["blk.1.ffn_down_exps.weight"][x0*e*f:(x0+1)*e*f], e, f, act)
		for i := range want {
			want[i] += 0.5 * down[i]
		}
	}
	if d, s := maxAbsDiff(rec.experts[[2]int{int(InputGateUp), 1}][:e], x64); d != 0 {
		t.Fatalf("expert 1 row 0 differs from token 0's ffn input by %g (scale %g)", d, s)
	}
	a := make([]float64, c.QDim()) // the post-attention state of token 0, and the block output
	for i := range a {
		a[i] = float64(rec.inputs[InputAttnO][i])
	}
	mid := matVec64(ws["blk.1.attn_output.weight"], e, c.QDim(), a)
	for i := range want {
		want[i] += mid[i] + float64(hIn[i])
	}
	if d, s := maxAbsDiff(h[:e], want); d > 1e-4*s {
		t.Fatalf("token 0: block output differs from the mean of experts 0 and 1 by %g (scale %g)", d, s)
	}
}
