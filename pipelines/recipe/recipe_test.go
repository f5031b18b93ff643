package recipe

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const good = `name: demo
source:
  model: models/m.gguf
calibration:
  corpus: corpus.txt
  sequences: 8
  ctx: 128
  window: 2
schemes:
  - match: 'blk\..*\.ffn_down\.weight'
    method: gptq
    dtype: I4_ROT_A8
    group: 32
  - match: 'blk\..*\.weight'
    method: rtn
    dtype: I4_NATIVE
screen:
  text: eval.txt
  ctx: 512
  gates: {max_ppl_ratio: 1.2}
output: out
`

func TestParseGood(t *testing.T) {
	r, err := Parse([]byte(good), "/recipes/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r.Source.Model != "/recipes/models/m.gguf" || r.Calibration.Corpus != "/recipes/corpus.txt" ||
		r.Screen.Text != "/recipes/eval.txt" || r.Output != "/recipes/out" {
		t.Errorf("paths not resolved against the recipe folder: %+v %+v %+v %q", r.Source, r.Calibration, r.Screen, r.Output)
	}
	if r.Board != "rk3588" || r.Calibration.Mode != "sequential" || r.Calibration.Window.Layers != 2 {
		t.Errorf("defaults: board %q mode %q window %+v", r.Board, r.Calibration.Mode, r.Calibration.Window)
	}
	s := r.SchemeFor("blk.3.ffn_down.weight")
	if s == nil || s.DType != "I4_ROT_A8" || s.Rotation != "hadamard" || s.ActBits != 8 || s.Damp != 0.01 {
		t.Errorf("ffn_down scheme: %+v", s)
	}
	if s := r.SchemeFor("blk.3.attn_q.weight"); s == nil || s.DType != "I4_NATIVE" || s.ActBits != 4 || s.Rotation != "none" {
		t.Errorf("attn_q scheme: %+v", s)
	}
	if s := r.SchemeFor("token_embd.weight"); s != nil {
		t.Errorf("token_embd matched %+v; patterns must match the whole name", s)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		sets       []string
		want       []string // substrings of the error
	}{
		{"unknown key with line", strings.Replace(good, "  ctx: 128", "  ctx: 128\n  windw: 3", 1), nil, []string{"windw", "[8:3]"}},
		{"wrong type", strings.Replace(good, "sequences: 8", "sequences: many", 1), nil, []string{"sequences", "[6:"}},
		{"duplicate key", strings.Replace(good, "output: out", "output: out\noutput: again", 1), nil, []string{"output", "already"}},
		{"no source", strings.Replace(good, "  model: models/m.gguf", "  model: ''", 1), nil, []string{"source: set model"}},
		{"bad dtype", strings.Replace(good, "dtype: I4_NATIVE", "dtype: I3", 1), nil, []string{"schemes[1]", "dtype", "I3"}},
		{"bad group", strings.Replace(good, "group: 32", "group: 48", 1), nil, []string{"schemes[0]", "group", "48"}},
		{"bad regex", strings.Replace(good, `'blk\..*\.weight'`, `'blk\.(('`, 1), nil, []string{"schemes[1]", "match"}},
		{"rotation conflicts dtype", strings.Replace(good, "group: 32", "group: 32\n    rotation: none", 1), nil, []string{"requires rotation hadamard"}},
		{"act bits conflict", strings.Replace(good, "dtype: I4_NATIVE", "dtype: I4_NATIVE\n    act_bits: 8", 1), nil, []string{"act_bits", "4-bit"}},
		{"gptq without calibration", strings.Replace(good, "calibration:\n  corpus: corpus.txt\n  sequences: 8\n  ctx: 128\n  window: 2\n", "", 1), nil, []string{"calibration: required"}},
		{"bad window", strings.Replace(good, "window: 2", "window: -1", 1), nil, []string{"window"}},
		{"bad mode", strings.Replace(good, "window: 2", "window: 2\n  mode: twice", 1), nil, []string{"calibration.mode"}},
		{"set unknown key", good, []string{"source.modle=x"}, []string{"unknown key", "source.modle"}},
		{"set wrong type", good, []string{"calibration.sequences=lots"}, []string{"calibration.sequences"}},
		{"set bad index", good, []string{"schemes.7.group=64"}, []string{"list index"}},
		{"set bad bracket index", good, []string{"schemes[x].group=64"}, []string{`"schemes.x": want a list index from 0 to 2`}},
		{"set no equals", good, []string{"source.model"}, []string{"dotted.path=value"}},
		{"bad name", strings.Replace(good, "name: demo", "name: Demo Pack", 1), nil, []string{"name:"}},
	}
	for _, tc := range tests {
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

func TestSet(t *testing.T) {
	r, err := Parse([]byte(good), "/r/x.yaml",
		"source.model=/abs/q8.gguf", "schemes.0.group=64", "calibration.window=auto",
		"screen.gates.max_kld_mean=0.05", "schemes.2.match=output\\.weight", "schemes.2.dtype=I8",
		"schemes[1].group=128")
	if err != nil {
		t.Fatal(err)
	}
	if r.Source.Model != "/abs/q8.gguf" || r.Schemes[0].Group != 64 || !r.Calibration.Window.Auto ||
		r.Screen.Gates.MaxKLDMean != 0.05 || len(r.Schemes) != 3 || r.Schemes[2].DType != "I8" || r.Schemes[1].Group != 128 {
		t.Errorf("overrides not applied: %+v", r)
	}
}

func TestLoadBuiltins(t *testing.T) {
	files, err := filepath.Glob("../recipes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no built-in recipes found: %v", err)
	}
	for _, f := range files {
		r, err := Load(f)
		if err != nil {
			// Built-ins other than the demo need a model (and texts) given with --set.
			if !strings.Contains(err.Error(), "source: set model") {
				t.Errorf("%s without overrides: %v", f, err)
			}
			sets := []string{"source.model=/m.gguf", "screen.text=/e.txt"}
			if _, err := Load(f, sets...); err != nil && strings.Contains(err.Error(), "calibration.corpus") {
				sets = append(sets, "calibration.corpus=/c.txt")
			}
			if _, err := Load(f, sets...); err != nil && strings.Contains(err.Error(), "imatrix") {
				sets = append(sets, "imatrix=/m.imatrix.gguf")
			}
			r, err = Load(f, sets...)
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
		}
		if want := strings.TrimSuffix(filepath.Base(f), ".yaml"); r.Name != want {
			t.Errorf("%s: name %q, want the file name %q", f, r.Name, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("name: x\nsource: {synth: {layers: 1, n_embd: 8, n_ff: 8, n_head: 1, vocab: 4, ctx: 4}}\nschemes: [{match: '.*', dtype: I8}]\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte(imatrixRecipe))
	f.Add([]byte(good + "residency: {budget: 25%, domains: 2}\n"))
	f.Add([]byte(strings.Replace(good, "group: 32\n", "group: 32\n    scale_search: gptq\n    scale_sign: search\n", 1)))
	f.Add([]byte("name: x\nsource: {synth: {layers: 1, n_embd: 8, n_ff: 8, n_head: 1, vocab: 4, ctx: 4, n_expert: 4}}\nschemes: [{match: '.*', dtype: I8}]\n"))
	f.Add([]byte(strings.Replace(good, "group: 32\n", "group: 32\n    gptq_inputs: asymmetric\n    act_clip: search\n", 1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(data, "/r/x.yaml")
		if err == nil && (r.Name == "" || len(r.Schemes) == 0) {
			t.Fatalf("accepted an incomplete recipe: %+v", r)
		}
		if err != nil {
			return
		}
		for i, sc := range r.Schemes {
			if sc.Importance == "imatrix" && (r.Imatrix == "" || sc.Method != "rtn" || sc.Rotation != "none") {
				t.Fatalf("accepted importance imatrix in schemes[%d] %+v with imatrix %q", i, sc, r.Imatrix)
			}
		}
		for i, sc := range r.Schemes {
			if sc.GPTQInputs != "" && (sc.Method != "gptq" || sc.ActOrder || sc.DType == "F16" || r.Calibration == nil || r.Calibration.ActSample < 1) {
				t.Fatalf("accepted gptq_inputs in schemes[%d] %+v with calibration %+v", i, sc, r.Calibration)
			}
		}
		if res := r.Residency; res != nil && (res.Domains < 1 || r.Calibration == nil) {
			t.Fatalf("accepted a residency section %+v without calibration or domains", res)
		}
		if b := r.BoardVerify; b != nil && (b.Board == "" || b.Text == "" || b.Trust == "" || b.Command == "" || !validRef(b.Ref)) {
			t.Fatalf("accepted an incomplete board_verify: %+v", b)
		}
	})
}

// Paths written in the recipe resolve against its folder; paths given by --set resolve against the
// working directory, like any path on a command line.
func TestPathResolution(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse([]byte(good), "/recipes/demo.yaml", "source.model=local/m.gguf", "screen.text=/abs/eval.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ field, got, want string }{
		{"source.model (--set, relative)", r.Source.Model, filepath.Join(wd, "local/m.gguf")},
		{"screen.text (--set, absolute)", r.Screen.Text, "/abs/eval.txt"},
		{"calibration.corpus (recipe)", r.Calibration.Corpus, "/recipes/corpus.txt"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.field, c.got, c.want)
		}
	}
}

// TestSetCreatedSectionIsNamed: --set into a section the recipe lacks creates it with zero fields;
// the errors about those fields say that --set created the section, and errors elsewhere do not.
func TestSetCreatedSectionIsNamed(t *testing.T) {
	const rtn = "name: r\nsource:\n  model: /m.gguf\nschemes:\n  - match: '.*'\n    method: rtn\n    dtype: I8\n"
	_, err := Parse([]byte(rtn), "/r/x.yaml", "calibration.corpus=/c.txt")
	if err == nil {
		t.Fatal("a calibration section without sequences and ctx was accepted")
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		if strings.HasPrefix(line, "calibration.") && !strings.Contains(line, "--set calibration.corpus=/c.txt created one") {
			t.Errorf("error does not name the --set that created the section: %s", line)
		}
	}
	if !strings.Contains(err.Error(), "calibration.sequences") {
		t.Errorf("no sequences error: %v", err)
	}
	if _, err := Parse([]byte(rtn), "/r/x.yaml", "calibration.corpus=/c.txt", "calibration.sequences=4", "calibration.ctx=64"); err != nil {
		t.Errorf("a complete section made by --set: %v", err)
	}
}

// TestParseSurvivesDecoderPanic: an input on which the YAML library panics is an ErrInvalid naming the
// recipe, in a file and in a --set section value, not a crash.
func TestParseSurvivesDecoderPanic(t *testing.T) {
	const bad = "calibration: 0\nschemes:\n  ! 0000000"
	if _, err := Parse([]byte(bad), "/r/x.yaml"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "x.yaml") {
		t.Errorf("Parse(%q) = %v, want ErrInvalid naming x.yaml", bad, err)
	}
	if _, err := Parse([]byte(good), "/r/x.yaml", "promote={to: I8, max_weights: 1, when: [\n  ! 0]}"); err == nil {
		t.Errorf("--set with a section the YAML library cannot read: no error")
	}
}

// FuzzSet feeds --set assignments to a valid recipe: an error or a recipe Parse accepted, never a panic.
func FuzzSet(f *testing.F) {
	for _, s := range []string{"schemes.0.group=64", "schemes[1].dtype=I8", "schemes.3={match: x, dtype: I8}",
		"calibration.window=auto", "source.synth=null", "promote={to: I8}", "screen.gates.max_kld_mean=0.05",
		"schemes[x]=1", "name=", "calibration=~"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, assignment string) {
		r, err := Parse([]byte(good), "/r/x.yaml", assignment)
		if err == nil && (r.Name == "" || len(r.Schemes) == 0) {
			t.Fatalf("--set %q: accepted an incomplete recipe: %+v", assignment, r)
		}
	})
}
