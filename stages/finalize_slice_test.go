package stages_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/internal/fixtures"
	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/stages"
)

// runStage executes one stage kind with params on inputs (name -> path) into a fresh folder and
// returns its outputs (name -> path).
// ownNumerics is this build's stages.Numerics, which key material must name for Execute to run it
// ("" for the pure-Go build, the OpenBLAS configuration for a -tags blas one).
func ownNumerics(t testing.TB) string {
	t.Helper()
	n, err := stages.Numerics()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func runStage(t *testing.T, stage, params string, inputs map[string]string) (map[string]string, error) {
	t.Helper()
	k, err := stages.Lookup(stage)
	if err != nil {
		t.Fatal(err)
	}
	b, err := k.Bind([]byte(params))
	if err != nil {
		return nil, err
	}
	m := stages.KeyMaterial{Stage: stage, Version: k.Version(), Params: b.Params(), Inputs: map[string]artifacts.Digest{}, Tools: map[string]artifacts.Digest{},
		Numerics: ownNumerics(t)}
	in := map[string]stages.File{}
	for n, p := range inputs {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		d, size, err := artifacts.SumReader(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		in[n] = stages.File{Path: p, Digest: d, Size: size}
		m.Inputs[n] = d
	}
	out, err := os.MkdirTemp(t.TempDir(), stage)
	if err != nil {
		t.Fatal(err)
	}
	names, err := stages.Execute(context.Background(), m, in, nil, out, nil)
	if err != nil {
		return nil, err
	}
	res := map[string]string{}
	for _, n := range names {
		res[n] = filepath.Join(out, n)
	}
	return res, nil
}

// moeSynth is fixtures.MoE as synth parameters.
var moeSynth = func() string { b, _ := json.Marshal(fixtures.MoE); return string(b) }()

// TestSynthMoELayout: synth with n_expert writes llama.cpp's llama-arch MoE layout: the expert KV,
// the F32 router [n_embd, n_expert] and the 3-D expert tensors in GGUF ne order instead of the
// dense FFN; a dense synth's parameters (its key) carry no expert fields.
func TestSynthMoELayout(t *testing.T) {
	out, err := runStage(t, "synth", moeSynth, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(context.Background(), out["model.gguf"])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := f.Uint("llama.expert_count"); err != nil || n != 4 {
		t.Errorf("llama.expert_count = %d (%v), want 4", n, err)
	}
	if n, err := f.Uint("llama.expert_used_count"); err != nil || n != 2 {
		t.Errorf("llama.expert_used_count = %d (%v), want 2", n, err)
	}
	for name, want := range map[string][]int64{
		"blk.1.ffn_gate_inp.weight":  {64, 4},
		"blk.1.ffn_gate_exps.weight": {64, 96, 4},
		"blk.1.ffn_up_exps.weight":   {64, 96, 4},
		"blk.1.ffn_down_exps.weight": {96, 64, 4},
	} {
		ti, err := f.Tensor(name)
		if err != nil || len(ti.Shape) != len(want) || ti.Shape[0] != want[0] || ti.Shape[1] != want[1] || ti.Shape[len(want)-1] != want[len(want)-1] {
			t.Errorf("%s: %v %v, want shape %v", name, ti.Shape, err, want)
		}
	}
	if ti, err := f.Tensor("blk.1.ffn_gate_inp.weight"); err == nil && ti.Type != gguf.TypeF32 {
		t.Errorf("router type %s, want F32", ti.Type)
	}
	for _, dense := range []string{"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"} {
		if _, err := f.Tensor(dense); err == nil {
			t.Errorf("MoE model has the dense %s", dense)
		}
	}
	k, _ := stages.Lookup("synth")
	b, err := k.Bind([]byte(`{"layers":2,"n_embd":64,"n_ff":96,"n_head":4,"n_head_kv":2,"vocab":360,"ctx":64,"type":"F16","seed":5}`))
	if err != nil {
		t.Fatal(err)
	}
	if p := string(b.Params()); strings.Contains(p, "expert") {
		t.Errorf("dense synth params carry expert fields: %s", p)
	}
	if _, err := runStage(t, "synth", strings.Replace(moeSynth, `"n_expert_used":2`, `"n_expert_used":5`, 1), nil); err == nil || !strings.Contains(err.Error(), "n_expert_used") {
		t.Errorf("n_expert_used 5 of 4: %v", err)
	}
}

func finalizeExpert(expert, extra string) string {
	return `{"tensor":"blk.1.ffn_down_exps.weight","method":"rtn","dtype":"I4","group":32,"rotation":"none","act_bits":8,` +
		`"clip_grid":null,"damp":0,"act_order":false,"seed":0,"n":64,"k":96,"expert":` + expert + extra + `}`
}

// TestFinalizeExpertSlice: finalize of expert e reads rows [e·N, (e+1)·N) of the 3-D tensor: the
// weight is named <name>#<e>, its source digest is the BLAKE3 of exactly that slice's bytes and it
// dequantizes close to the slice; an expert out of range is an error naming the tensor.
func TestFinalizeExpertSlice(t *testing.T) {
	ctx := context.Background()
	model := fixtures.Synth(t, fixtures.MoE)
	f, err := gguf.Open(ctx, model)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ti, _ := f.Tensor("blk.1.ffn_down_exps.weight")
	rb := ti.RowBytes()
	start, _ := f.DataRange(ti)
	for _, e := range []int{0, 2, 3} {
		out, err := runStage(t, "finalize", finalizeExpert(string(rune('0'+e)), ""), map[string]string{"model": model})
		if err != nil {
			t.Fatal(err)
		}
		q, err := stages.ReadQWeight(out["weight"])
		if err != nil {
			t.Fatal(err)
		}
		want := expertName(e)
		if q.Meta.Name != want || q.Meta.N != 64 || q.Meta.K != 96 {
			t.Fatalf("expert %d: meta %+v, want name %s, N 64, K 96", e, q.Meta, want)
		}
		slice := make([]byte, 64*rb)
		if _, err := f.ReaderAt().ReadAt(slice, start+int64(e)*64*rb); err != nil {
			t.Fatal(err)
		}
		if d := artifacts.SumBytes(slice).String(); q.Meta.Source != d {
			t.Errorf("expert %d: source %s, the slice's bytes hash to %s", e, q.Meta.Source, d)
		}
		x := make([]float32, 64*96)
		if err := f.ReadRows(ctx, ti, int64(e)*64, x); err != nil {
			t.Fatal(err)
		}
		pw, err := q.PackWeight()
		if err != nil {
			t.Fatal(err)
		}
		var num, den float64
		for i, v := range pw.Dequantize() {
			num += float64(v-x[i]) * float64(v-x[i])
			den += float64(x[i]) * float64(x[i])
		}
		if rel := num / den; rel > 0.02 || q.Meta.QErr <= 0 {
			t.Errorf("expert %d: squared relative error %v of the decoded weight against its slice (qerr %v)", e, rel, q.Meta.QErr)
		}
	}
	_, err = runStage(t, "finalize", finalizeExpert("4", ""), map[string]string{"model": model})
	if err == nil || !strings.Contains(err.Error(), "blk.1.ffn_down_exps.weight") || !strings.Contains(err.Error(), "4 experts") {
		t.Errorf("expert 4 of 4: %v", err)
	}
}

// TestFinalizeImatrixErrors: finalize with importance imatrix fails clearly on a missing entry, a K
// mismatch and an expert no token reached, naming the file and the tensor (a missing file is a plan
// error: pipelines/build).
func TestFinalizeImatrixErrors(t *testing.T) {
	ctx := context.Background()
	model := fixtures.Synth(t, fixtures.MoE)
	dir := t.TempDir()
	write := func(name string, es ...*calib.ImatrixEntry) string {
		var b bytes.Buffer
		if err := calib.WriteImatrixGGUF(ctx, &b, es, []string{"t"}, 1); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, b.Bytes(), 0o644)
		return p
	}
	rows := func(k, n int, counts ...float64) *calib.ImatrixEntry {
		e := &calib.ImatrixEntry{Name: "blk.1.ffn_down_exps.weight", K: k, Counts: counts}
		for m := 0; m < n; m++ {
			r := make([]float64, k)
			for i := range r {
				r[i] = float64(1 + (i*7+m)%5)
			}
			e.Sum2 = append(e.Sum2, r)
		}
		return e
	}
	good := write("good.gguf", rows(96, 4, 10, 10, 0, 10))
	other := write("other.gguf", &calib.ImatrixEntry{Name: "blk.0.attn_q.weight", K: 64, Sum2: [][]float64{make([]float64, 64)}, Counts: []float64{1}})
	wrongK := write("wrongk.gguf", rows(64, 4, 1, 1, 1, 1))
	imp := `,"importance":"imatrix"`
	for _, tc := range []struct {
		name, expert, imatrix string
		want                  []string
	}{
		{"missing entry", "0", other, []string{"other.gguf", "blk.1.ffn_down_exps.weight"}},
		{"K mismatch", "0", wrongK, []string{"wrongk.gguf", "blk.1.ffn_down_exps.weight", "[64, 4]", "[96, 4]"}},
		{"no tokens", "2", good, []string{"good.gguf", "blk.1.ffn_down_exps.weight#2", "no calibration token"}},
	} {
		_, err := runStage(t, "finalize", finalizeExpert(tc.expert, imp), map[string]string{"model": model, "imatrix": tc.imatrix})
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tc.name, err, w)
			}
		}
	}
	// expert 1 with the good imatrix works, and its qerr is the importance-weighted one
	out, err := runStage(t, "finalize", finalizeExpert("1", imp), map[string]string{"model": model, "imatrix": good})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := runStage(t, "finalize", finalizeExpert("1", ""), map[string]string{"model": model})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out["weight"])
	b, _ := os.ReadFile(plain["weight"])
	if bytes.Equal(a, b) {
		t.Error("the imatrix changed nothing in expert 1's finalized weight")
	}
}

// tiledExperts finalizes (RTN, finalizeExpert) and tiles the 4 experts of fixtures.MoE's
// blk.1.ffn_down_exps.weight in model and returns the tiled entries' paths, by expert.
func tiledExperts(t *testing.T, model string) []string {
	t.Helper()
	var paths []string
	for e := 0; e < 4; e++ {
		fin, err := runStage(t, "finalize", finalizeExpert(string(rune('0'+e)), ""), map[string]string{"model": model})
		if err != nil {
			t.Fatal(err)
		}
		tl, err := runStage(t, "tile", `{"nibbles":"low-first","n":64,"kp":96}`, map[string]string{"weight": fin["weight"]})
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, tl["entry"])
	}
	return paths
}

// expertName is the entry name of expert e of blk.1.ffn_down_exps.weight.
func expertName(e int) string { return "blk.1.ffn_down_exps.weight#" + string(rune('0'+e)) }

// TestPackMissingExpert: a pack holding experts 0..2 of a 4-expert tensor is refused by verify-local
// (the stub holes the whole tensor, so expert 3 would be lost), naming the tensor and the missing
// expert, whatever stub it is given; with all 4 experts the stub emit-stub writes for the tensor
// passes.
func TestPackMissingExpert(t *testing.T) {
	model := fixtures.Synth(t, fixtures.MoE)
	tiles := map[string]string{}
	for e, path := range tiledExperts(t, model) {
		tiles[expertName(e)] = path
	}
	for _, n := range []int{3, 4} {
		var names []string
		in := map[string]string{}
		for e := 0; e < n; e++ {
			name := expertName(e)
			names = append(names, `"`+name+`"`)
			in["e."+name] = tiles[name]
		}
		pk, err := runStage(t, "write-orkpack", `{"board":"rk3588","entries":[`+strings.Join(names, ",")+`],"max_entry_bytes":1048576}`, in)
		if err != nil {
			t.Fatal(err)
		}
		st, err := runStage(t, "emit-stub", `{"owned":["blk.1.ffn_down_exps.weight"]}`, map[string]string{"model": model})
		if err != nil {
			t.Fatal(err)
		}
		for _, stub := range []string{st["stub.gguf"], model} {
			_, err = runStage(t, "verify-local", `{"board":"rk3588"}`, map[string]string{"model": model, "pack": pk["pack"], "stub": stub})
			if n == 3 && (err == nil || !strings.Contains(err.Error(), "blk.1.ffn_down_exps.weight") || !strings.Contains(err.Error(), "expert(s) [3]")) {
				t.Errorf("verify-local of a pack missing expert 3 (stub %s): %v", stub, err)
			}
		}
		if n == 4 {
			if _, err := runStage(t, "verify-local", `{"board":"rk3588"}`, map[string]string{"model": model, "pack": pk["pack"], "stub": st["stub.gguf"]}); err != nil {
				t.Fatalf("verify-local with all 4 experts: %v", err)
			}
		}
	}
}
