package stages_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
	"orkpipe/stages"
)

// TestCalibrateEncodedSameOutputs: calibrate and propagate hold a quantized model's weights in their
// source encoding; their outputs must be the very bytes a float32 (Dense) reading gives. The reference
// is calib.Capture / calib.Propagate over model.OpenGGUF's float32 source, on synthetic Q8_0 and BF16
// models and a real Q4_0 one (stories260K: Q4_0 weights and an F16 ffn_down).
func TestCalibrateEncodedSameOutputs(t *testing.T) {
	corpus := testfiles.Path(t, "stories-calib.txt")
	for _, src := range []struct{ name, synth string }{
		{"synth-q8_0", `{"layers":2,"n_embd":128,"n_ff":320,"n_head":4,"n_head_kv":2,"vocab":360,"ctx":64,"type":"Q8_0","seed":4}`},
		{"synth-bf16", `{"layers":2,"n_embd":96,"n_ff":160,"n_head":4,"n_head_kv":1,"vocab":360,"ctx":64,"type":"BF16","seed":4}`},
		{"stories260K-Q4_0", ""},
	} {
		t.Run(src.name, func(t *testing.T) {
			var modelPath string
			if src.synth != "" {
				modelPath = mustExec(t, "synth", src.synth, nil)["model.gguf"]
			} else {
				modelPath = testfiles.Path(t, "stories260K-Q4_0.gguf")
			}
			shape := shapeOfFile(t, modelPath)
			if shape.WeightType == "" {
				t.Fatalf("%s: ShapeOf gives no weight_type", src.name)
			}
			const nSeq, ctxLen = 3, 80
			tokens := mustExec(t, "tokenize", fmt.Sprintf(`{"sequences":%d,"ctx":%d,"corpus_name":"stories-calib.txt"}`, nSeq, ctxLen),
				map[string]string{"model": modelPath, "corpus": corpus})["tokens"]
			sj, _ := json.Marshal(shape)
			got := mustExec(t, "calibrate", fmt.Sprintf(`{"shape":%s,"start":0,"end":1,"sequences":%d,"ctx":%d,"hidden":true}`, sj, nSeq, ctxLen),
				map[string]string{"model": modelPath, "tokens": tokens})
			prop := mustExec(t, "propagate", fmt.Sprintf(`{"shape":%s,"start":0,"end":1,"sequences":%d,"ctx":%d,"weights":[]}`, sj, nSeq, ctxLen),
				map[string]string{"model": modelPath, "tokens": tokens})

			ctx := context.Background()
			m, _, gf, err := model.OpenGGUF(ctx, modelPath, 0) // float32 Dense weights
			if err != nil {
				t.Fatal(err)
			}
			defer gf.Close()
			seqs, err := stages.ReadTokens(tokens)
			if err != nil {
				t.Fatal(err)
			}
			hidden := func(run func(in calib.HiddenSource, out *calib.HiddenWriter) error) []byte {
				es, err := calib.NewEmbeddingSource(m, seqs)
				if err != nil {
					t.Fatal(err)
				}
				var buf bytes.Buffer
				hdr := es.Header()
				hdr.Layer = 1
				hw, err := calib.NewHiddenWriter(&buf, hdr)
				if err != nil {
					t.Fatal(err)
				}
				if err := run(es, hw); err != nil {
					t.Fatal(err)
				}
				return buf.Bytes()
			}
			var ref *calib.Result
			refHidden := hidden(func(in calib.HiddenSource, out *calib.HiddenWriter) (err error) {
				ref, err = calib.Capture(ctx, m, calib.Window{Start: 0, End: 1}, in, out)
				return err
			})
			refProp := hidden(func(in calib.HiddenSource, out *calib.HiddenWriter) error {
				return calib.Propagate(ctx, m, calib.Window{Start: 0, End: 1}, in, out)
			})
			for in := model.Input(0); in < model.NumInputs; in++ {
				name, _, _ := stages.HessianOutput(shape, "blk.0."+m.Cfg.Sites(0)[in].Weights[0].Name+".weight")
				h, err := calib.ReadHessianFile(ctx, got[name])
				if err != nil {
					t.Fatal(err)
				}
				r := ref.Hessian(0, in)
				if h.K != r.K || h.Tokens != r.Tokens || !slices.Equal(h.Data, stored32(r.Data)) {
					t.Errorf("%s: K %d, %d tokens; float32 weights give K %d, %d tokens (or other values)", name, h.K, h.Tokens, r.K, r.Tokens)
				}
			}
			for what, c := range map[string]struct {
				path string
				want []byte
			}{"calibrate hidden": {got["hidden"], refHidden}, "propagate hidden": {prop["hidden"], refProp}} {
				b, err := os.ReadFile(c.path)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, c.want) {
					t.Errorf("%s: %d bytes differ from the float32 reading's %d", what, len(b), len(c.want))
				}
			}
		})
	}
}

// TestCalibrateWeightType: a shape's weight_type must name an encoding the stages keep; a model whose
// weights are wider than the plan's weight_type is refused, naming both; a plan without weight_type
// (float32 estimate) accepts any model of its shape.
func TestCalibrateWeightType(t *testing.T) {
	corpus := writeCorpus(t)
	modelPath := mustExec(t, "synth", `{"layers":1,"n_embd":64,"n_ff":96,"n_head":4,"n_head_kv":2,"vocab":360,"ctx":64,"type":"F16","seed":4}`, nil)["model.gguf"]
	tokens := mustExec(t, "tokenize", `{"sequences":2,"ctx":16,"corpus_name":"corpus.txt"}`, map[string]string{"model": modelPath, "corpus": corpus})["tokens"]
	shape := shapeOfFile(t, modelPath)
	if shape.WeightType != "F16" {
		t.Fatalf("F16 model: weight_type %q", shape.WeightType)
	}
	run := func(wt string) error {
		s := shape
		s.WeightType = wt
		sj, _ := json.Marshal(s)
		_, err := runStage(t, "calibrate", `{"shape":`+string(sj)+`,"start":0,"end":1,"sequences":2,"ctx":16,"hidden":false}`,
			map[string]string{"model": modelPath, "tokens": tokens})
		return err
	}
	for _, c := range []struct {
		wt, want string // want: "" for success, else a part of the error
	}{
		{"", ""}, {"F16", ""}, {"BF16", ""},
		{"Q8_0", `wider than the plan's weight_type "Q8_0"`},
		{"F32", `weight_type "F32"`},
		{"Q9_9", `weight_type "Q9_9"`},
	} {
		err := run(c.wt)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("weight_type %q: %v, want %q", c.wt, err, c.want)
		}
	}
	// The estimates count encoded weights: F16 below float32, Q8_0 below F16.
	f32 := shape
	f32.WeightType = ""
	q8 := shape
	q8.WeightType = "Q8_0"
	if c16, c32, c8 := stages.CalibrateMemory(shape, 0, 1, 2, 16), stages.CalibrateMemory(f32, 0, 1, 2, 16), stages.CalibrateMemory(q8, 0, 1, 2, 16); !(c8 < c16 && c16 < c32) {
		t.Errorf("CalibrateMemory Q8_0 %d, F16 %d, F32 %d: want increasing", c8, c16, c32)
	}
	if p16, p32 := stages.PropagateMemory(shape, 0, 1, 2, 16, nil), stages.PropagateMemory(f32, 0, 1, 2, 16, nil); !(p16 < p32) {
		t.Errorf("PropagateMemory F16 %d, F32 %d: want F16 below", p16, p32)
	}
}

func writeCorpus(t *testing.T) string {
	t.Helper()
	corpus := t.TempDir() + "/corpus.txt"
	if err := os.WriteFile(corpus, []byte(fingerprintText), 0o644); err != nil {
		t.Fatal(err)
	}
	return corpus
}

// shapeOfFile returns the shape of a model file as the planner derives it.
func shapeOfFile(t *testing.T, path string) stages.ModelShape {
	t.Helper()
	f, err := gguf.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := model.ConfigFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return stages.ShapeOf(cfg)
}

// stored32 returns the values of a Hessian as a Hessian file stores them (rounded to float32).
func stored32(d []float64) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = float64(float32(v))
	}
	return out
}
