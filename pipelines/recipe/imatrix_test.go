package recipe

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const imatrixRecipe = `name: im
source:
  model: m.gguf
imatrix: im.gguf
schemes:
  - match: 'blk\..*\.ffn_down\.weight'
    method: rtn
    dtype: I4
    group: 32
    importance: imatrix
  - match: 'blk\..*\.weight'
    dtype: I4_NATIVE
`

func TestImatrixKeys(t *testing.T) {
	r, err := Parse([]byte(imatrixRecipe), "/r/x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r.Imatrix != "/r/im.gguf" || r.Schemes[0].Importance != "imatrix" || r.Schemes[1].Importance != "" {
		t.Errorf("imatrix %q, importance %q / %q", r.Imatrix, r.Schemes[0].Importance, r.Schemes[1].Importance)
	}
	// none is the default and is normalised away, so recipes without the key keep their JSON (key material).
	r2, err := Parse([]byte(good), "/r/x.yaml", "schemes.1.importance=none")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(r2)
	if strings.Contains(string(b), "importance") || strings.Contains(string(b), "imatrix") || strings.Contains(string(b), "n_expert") {
		t.Errorf("a recipe without imatrix/experts marshals new keys: %s", b)
	}
	r3, err := Parse([]byte(imatrixRecipe), "/r/x.yaml", "imatrix=/data/other.dat")
	if err != nil || r3.Imatrix != "/data/other.dat" {
		t.Errorf("--set imatrix: %v %q", err, r3.Imatrix)
	}
}

func TestImatrixErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		sets       []string
		want       []string
	}{
		{"unknown importance", imatrixRecipe, []string{"schemes.0.importance=hessian"}, []string{"schemes[0]", "importance", "hessian"}},
		{"importance without imatrix", strings.Replace(imatrixRecipe, "imatrix: im.gguf\n", "", 1), nil, []string{"schemes[0]", "importance imatrix", "imatrix key"}},
		{"imatrix unused", imatrixRecipe, []string{"schemes.0.importance=none"}, []string{"imatrix:", "no scheme uses it"}},
		{"gptq with imatrix", imatrixRecipe, []string{"schemes.0.method=gptq"}, []string{"schemes[0]", "GPTQ needs the full Hessian", "off-diagonal"}},
		{"gptq with only an imatrix", imatrixRecipe, []string{"schemes.1.method=gptq"}, []string{"calibration: required", "an imatrix is not enough", "off-diagonal"}},
		{"imatrix with rotation", imatrixRecipe, []string{"schemes.0.dtype=I4_ROT_A8"}, []string{"schemes[0]", "rotation hadamard", "off-diagonal"}},
		{"imatrix with F16", imatrixRecipe, []string{"schemes.0.dtype=F16", "schemes.0.group=0"}, []string{"schemes[0]", "F16"}},
		{"misspelled key with line", strings.Replace(imatrixRecipe, "importance: imatrix", "importanse: imatrix", 1), nil, []string{"importanse", "[10:5]"}},
		{"imatrix wrong type", strings.Replace(imatrixRecipe, "imatrix: im.gguf", "imatrix: [a, b]", 1), nil, []string{"imatrix", "[4:"}},
		{"synth one expert", "name: x\nsource: {synth: {layers: 1, n_embd: 8, n_ff: 8, n_head: 1, vocab: 4, ctx: 4, n_expert: 1}}\nschemes: [{match: '.*', dtype: I8}]\n", nil, []string{"source.synth.n_expert", "at least 2"}},
		{"synth used > experts", "name: x\nsource: {synth: {layers: 1, n_embd: 8, n_ff: 8, n_head: 1, vocab: 4, ctx: 4, n_expert: 4, n_expert_used: 5}}\nschemes: [{match: '.*', dtype: I8}]\n", nil, []string{"source.synth.n_expert_used", "1..4"}},
		{"synth used on dense", "name: x\nsource: {synth: {layers: 1, n_embd: 8, n_ff: 8, n_head: 1, vocab: 4, ctx: 4, n_expert_used: 2}}\nschemes: [{match: '.*', dtype: I8}]\n", nil, []string{"source.synth.n_expert_used", "dense"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "/r/x.yaml", tc.sets...)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestSynthExpertsDefault(t *testing.T) {
	r, err := Parse([]byte("name: x\nsource: {synth: {layers: 1, n_embd: 8, n_ff: 8, n_head: 1, vocab: 4, ctx: 4, n_expert: 4}}\nschemes: [{match: '.*', dtype: I8}]\n"), "/r/x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Source.Synth; s.Experts != 4 || s.ExpertsUsed != 2 {
		t.Errorf("experts %d used %d, want 4 and the default 2", s.Experts, s.ExpertsUsed)
	}
}
