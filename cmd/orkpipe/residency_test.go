package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
	"orkpipe/registry"
)

// residentPack writes a small MoE pack with a residency plan: a dense int8 weight, the up/down slices of
// two experts of block 0 and the up slice of one expert of block 1 (int8 32x32, 4 KiB resident each);
// expert 0 of block 0 is hot (7 of 10 lookups).
func residentPack(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "moe.orkpack")
	plan := pack.Residency{Domains: 1, Budget: 8192, Routing: pack.Digest{7}, Hot: 1, Experts: []pack.ResidentExpert{
		{Layer: 0, Index: 0, Lookups: 7, Entries: []string{"blk.0.ffn_up_exps.weight#0", "blk.0.ffn_down_exps.weight#0"}},
		{Layer: 0, Index: 1, Lookups: 3, Entries: []string{"blk.0.ffn_up_exps.weight#1", "blk.0.ffn_down_exps.weight#1"}},
		{Layer: 1, Index: 0, Lookups: 0, Entries: []string{"blk.1.ffn_up_exps.weight#0"}}}}
	ctx := context.Background()
	w, err := pack.Create(ctx, path, board.Planner(board.RK3588()), pack.WithResidency(plan))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i, name := range []string{"blk.0.attn_q.weight", "blk.0.ffn_up_exps.weight#0", "blk.0.ffn_up_exps.weight#1",
		"blk.0.ffn_down_exps.weight#0", "blk.0.ffn_down_exps.weight#1", "blk.1.ffn_up_exps.weight#0"} {
		wt := pack.Weight{Meta: pack.Meta{Name: name, DType: pack.I8, K: 32, N: 32, Source: pack.Digest{byte(i + 1)}},
			Codes: make([]int8, 32*32), Scales: make([]float32, 32)}
		for j := range wt.Codes {
			wt.Codes[j] = int8(j%7 - 3)
		}
		for j := range wt.Scales {
			wt.Scales[j] = 0.01
		}
		if err := w.Add(ctx, wt); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestResidencyShown: inspect (text and JSON), pack verify, the registry's pack annotation and describe's
// line all show the residency plan; pack verify refuses it on a profile whose domain cannot hold the
// dense weight and the hot expert.
func TestResidencyShown(t *testing.T) {
	path := residentPack(t)
	var out bytes.Buffer
	opts := newGlobalOptions(&out, &out)
	opts.json = true
	if err := runInspectPack(context.Background(), opts, path); err != nil {
		t.Fatal(err)
	}
	var got packInspectJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	r := got.Residency
	if r == nil || r.Hot != 1 || len(r.Experts) != 3 || r.Lookups != 10 || r.HotLookups != 7 || r.HitRate != 0.7 || r.Experts[0].Entries[1] != "blk.0.ffn_down_exps.weight#0" {
		t.Fatalf("inspect --json residency %+v", r)
	}
	out.Reset()
	opts.json = false
	if err := runInspectPack(context.Background(), opts, path); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"residency: 1 of 3 experts resident at start in 1 domain(s), budget 0.01 MiB; expected hit rate 0.7000 (7 of 10", "hot (block.expert(lookups)): 0.0(7)", "streamed, in order: 0.1(3) 1.0(0)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("inspect lacks %q:\n%s", want, out.String())
		}
	}
	if o, code := runPackCLI(t, "pack", "verify", path); code != 0 {
		t.Fatalf("pack verify: exit %d: %s", code, o)
	}
	small := board.RK3588()
	small.Name, small.DomainCeiling, small.Headroom = "small", 8192, 0
	if o, code := runPackCLI(t, "pack", "verify", "--board", writeProfileFile(t, small), path); code != 1 || !strings.Contains(o, "residency plan: the dense entries and the 1 hot experts do not fit 1 domains of small") {
		t.Fatalf("pack verify on 8 KiB domains: exit %d: %s", code, o)
	}
	a, err := registry.PackAnnotator.FileAnnotations(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	line := residencyLine(a[registry.AnnotationPackResidency])
	if line != "residency: 1 of 3 experts resident at start in 1 domain(s), budget 8.00 KiB, expected hit rate 0.7000 (7 of 10 routed lookups)" {
		t.Fatalf("describe line %q from annotation %q", line, a[registry.AnnotationPackResidency])
	}
}

func writeProfileFile(t *testing.T, p board.Profile) string {
	t.Helper()
	js, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), p.Name+".json")
	if err := os.WriteFile(path, js, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
