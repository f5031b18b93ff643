package stages_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
	"orkpipe/stages"
)

// TestShapeRoundTrip: the shape of every model the forward pass runs (llama, the hybrid fixtures in
// F32 and Q8_0) survives JSON (as stage parameters carry it) and gives back a config whose blocks have
// the model's kinds and sites, which is what the memory estimates and the calibrate outputs are made of.
func TestShapeRoundTrip(t *testing.T) {
	for _, c := range []struct {
		file, kinds string
	}{
		{"stories260K.gguf", ""},
		{"tiny-qwen35.gguf", "DdDdDdGdDdDdDdGd"},
		{"tiny-qwen35-q8_0.gguf", "DdDdDdGdDdDdDdGd"},
		{"tiny-lfm2moe.gguf", "CdCdAmCmCmAm"},
	} {
		t.Run(c.file, func(t *testing.T) {
			f, err := gguf.Open(context.Background(), testfiles.Path(t, c.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cfg, err := model.ConfigFromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(stages.ShapeOf(cfg))
			var s stages.ModelShape
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatal(err)
			}
			if s.Kinds != c.kinds {
				t.Errorf("kinds %q, want %q", s.Kinds, c.kinds)
			}
			if strings.Contains(string(raw), "nextn") {
				t.Errorf("a shape without multi-token-prediction blocks names them: %s (its keys would change)", raw)
			}
			if c.kinds == "" && strings.Contains(string(raw), "arch") {
				t.Errorf("a llama shape names its arch: %s (its keys would change)", raw)
			}
			back := s.Config()
			if err := back.Validate(); err != nil {
				t.Fatalf("config of the shape %s: %v", raw, err)
			}
			for l := 0; l < cfg.NLayer; l++ {
				if back.Kind(l) != cfg.Kind(l) || !reflect.DeepEqual(back.Sites(l), cfg.Sites(l)) {
					t.Errorf("block %d: %v %+v, the model's %v %+v", l, back.Kind(l), back.Sites(l), cfg.Kind(l), cfg.Sites(l))
				}
			}
		})
	}
	bad := []stages.ModelShape{
		{Layers: 2, Embd: 64, FF: 96, Heads: 4, HeadsKV: 2, HeadDim: 16, Vocab: 360, Arch: "lfm2", Kinds: "Cd"},   // one block of two
		{Layers: 1, Embd: 64, FF: 96, Heads: 4, HeadsKV: 2, HeadDim: 16, Vocab: 360, Arch: "lfm2", Kinds: "Xd"},   // no mixer X
		{Layers: 1, Embd: 64, FF: 96, Heads: 4, HeadsKV: 2, HeadDim: 16, Vocab: 360, Kinds: "Ad"},                 // kinds without arch
		{Layers: 1, Embd: 64, FF: 96, Heads: 4, HeadsKV: 2, HeadDim: 16, Vocab: 360, Arch: "qwen35", Kinds: "Dd"}, // DeltaNet without ssm
		{Layers: 1, Embd: 64, FF: 96, Heads: 4, HeadsKV: 2, HeadDim: 16, Vocab: 360, NextN: 1},                    // llama has no MTP blocks
	}
	// qwen35's multi-token-prediction blocks survive the round trip (the planner reads them from it).
	mtp := stages.ModelShape{Layers: 1, Embd: 64, FF: 96, Heads: 4, HeadsKV: 2, HeadDim: 32, Vocab: 360, Arch: "qwen35", Kinds: "Gd", NextN: 1}
	if back := stages.ShapeOf(mtp.Config()); back.NextN != 1 {
		t.Errorf("shape %+v -> config -> shape %+v: NextN lost", mtp, back)
	}
	for _, s := range []stages.ModelShape{mtp, {Layers: 1, Embd: 64, FF: 96, Heads: 4, HeadsKV: 2, HeadDim: 16, Vocab: 360}} {
		raw, _ := json.Marshal(stages.CalibrateParams{Shape: s, Start: 0, End: 1, Sequences: 1, Ctx: 4})
		k, _ := stages.Lookup("calibrate")
		if _, err := k.Bind(raw); err != nil {
			t.Errorf("calibrate refused a good shape %s: %v", raw, err)
		}
	}
	for _, s := range bad {
		raw, _ := json.Marshal(stages.CalibrateParams{Shape: s, Start: 0, End: 1, Sequences: 1, Ctx: 4})
		k, _ := stages.Lookup("calibrate")
		if _, err := k.Bind(raw); err == nil {
			t.Errorf("calibrate bound a bad shape %s", raw)
		}
	}
}
