package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/quant"
)

func TestQErrJSONStories260K(t *testing.T) {
	var out bytes.Buffer
	opts := newGlobalOptions(&out, &out)
	opts.json = true
	opts.jobs = 2
	err := runQErr(context.Background(), opts, testfiles.Path(t, "stories260K.gguf"),
		qerrFlags{tensors: `^blk\.[01]\.`, seed: 1, tokens: 256, actClip: 1})
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Schemes []struct {
			Scheme       string  `json:"scheme"`
			WeightRelErr float64 `json:"weight_rel_err"`
			MatmulRelErr float64 `json:"matmul_rel_err"`
		} `json:"schemes"`
		Tensors []struct {
			Name    string `json:"name"`
			Schemes []struct {
				Scheme string `json:"scheme"`
			} `json:"schemes"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rep.Tensors) != 14 { // 7 matmul weights in each of blk.0 and blk.1
		t.Fatalf("%d tensors, want 14", len(rep.Tensors))
	}
	if len(rep.Schemes) != len(quant.Schemes) {
		t.Fatalf("%d schemes, want %d", len(rep.Schemes), len(quant.Schemes))
	}
	m := map[string]float64{}
	for i, s := range rep.Schemes {
		if s.Scheme != quant.Schemes[i] {
			t.Errorf("scheme %d = %q, want %q", i, s.Scheme, quant.Schemes[i])
		}
		if !(s.WeightRelErr > 0 && s.MatmulRelErr > 0) {
			t.Errorf("%s: errors %v %v", s.Scheme, s.WeightRelErr, s.MatmulRelErr)
		}
		m[s.Scheme] = s.MatmulRelErr
	}
	if !(m["w4a4-pc"] > m["w4a4-g32"] && m["w4a4-g32"] > m["w4a4-g32-rot"] && m["w4a4-g32-rot"] > m["w4a8-g32-rot"]) {
		t.Errorf("ordering broken: %v", m)
	}
	if !(m["w4a8-g32-rot-gptq"] <= m["q4_0"]) {
		t.Errorf("GPTQ %v above q4_0 %v", m["w4a8-g32-rot-gptq"], m["q4_0"])
	}
}

func TestQErrTextAndErrors(t *testing.T) {
	var out bytes.Buffer
	opts := newGlobalOptions(&out, &out)
	opts.jobs = 1
	path := testfiles.Path(t, "stories260K.gguf")
	if err := runQErr(context.Background(), opts, path, qerrFlags{tensors: `blk\.0\.ffn_down`, seed: 3, calibSeed: 5, tokens: 64, actClip: 0.9}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"blk.0.ffn_down.weight", "w4a8-g32-rot-gptq", "mean over 1 weights", "x q4_0", "held-out set (seed 5)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	var ue usageError
	for _, f := range []qerrFlags{
		{tensors: "(", tokens: 8, actClip: 1},
		{tokens: 0, actClip: 1},
		{tokens: 8, actClip: 1.5},
		{tokens: 8, actClip: 1, seed: 4, calibSeed: 4},
	} {
		if err := runQErr(context.Background(), opts, path, f); !errors.As(err, &ue) {
			t.Errorf("%+v: %v, want a usage error", f, err)
		}
	}
	// --tokens the run cannot hold in --mem is refused before anything is made (2e9 ran out of memory;
	// the small budget first, fatal, so that a regression fails here instead of running out of memory).
	small := newGlobalOptions(&out, &out)
	small.memText = "4MiB" // 1000 tokens: at output.weight 0.26 MB of activations and 4.1 MB of products
	if err := runQErr(context.Background(), small, path, qerrFlags{tokens: 1000, actClip: 1}); !errors.As(err, &ue) || !strings.Contains(err.Error(), "above --mem 4.00 MiB") {
		t.Fatalf("--tokens 1000 under --mem 4MiB: %v, want a usage error", err)
	}
	if err := runQErr(context.Background(), opts, path, qerrFlags{tokens: 2_000_000_000, actClip: 1}); !errors.As(err, &ue) ||
		!strings.Contains(err.Error(), "take 7.92 TiB (at output.weight: 2000000000 tokens x 64 values of the 1 width(s) met, float32, 1 set(s), the weight, 512 x 64 float32, and its products, 2000000000 x 512 float64)") {
		t.Errorf("--tokens 2e9: %v, want a usage error naming the activation sets", err)
	}
	// The weight itself counts (an 8 GiB F32 weight under --mem 2GiB ran out of memory): output.weight's
	// 128 KiB alone are above 100 KiB, its one token's activations and products 4.3 KB.
	tiny := newGlobalOptions(&out, &out)
	tiny.memText = "100KiB"
	if err := runQErr(context.Background(), tiny, path, qerrFlags{tensors: `output\.weight`, tokens: 1, actClip: 1}); !errors.As(err, &ue) ||
		!strings.Contains(err.Error(), "the weight, 512 x 64 float32") {
		t.Errorf("output.weight under --mem 100KiB: %v, want a usage error naming the weight", err)
	}
	if err := runQErr(context.Background(), small, path, qerrFlags{tensors: `blk\.0\.attn_q`, tokens: 1000, actClip: 1}); err != nil {
		t.Errorf("--tokens 1000 of one 64-wide weight under --mem 4MiB (0.77 MB): %v", err)
	}
	if err := runQErr(context.Background(), opts, path, qerrFlags{tensors: "nomatch", tokens: 8, actClip: 1}); err == nil || !strings.Contains(err.Error(), "no weights") {
		t.Errorf("no matching tensor: %v", err)
	}
	if err := runQErr(context.Background(), opts, "/nonexistent.gguf", qerrFlags{tokens: 8, actClip: 1}); err == nil || !strings.Contains(err.Error(), "/nonexistent.gguf") {
		t.Errorf("missing file: %v", err)
	}
}
