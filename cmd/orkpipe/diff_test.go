package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/ork/pack"
	"orkpipe/pipelines/verify/verifytest"
)

func TestDiff(t *testing.T) {
	dir := t.TempDir()
	a := buildStoriesPack(t, dir, "a.orkpack", "", "blk.1.attn_k.weight")
	b := buildStoriesPack(t, dir, "b.orkpack", "blk.0.attn_q.weight", "blk.1.attn_v.weight")
	out, code := runPackCLI(t, "diff", "--json", a, b)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var d diffJSON
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.OnlyA) != 1 || d.OnlyA[0] != "blk.1.attn_v.weight" || len(d.OnlyB) != 1 || d.OnlyB[0] != "blk.1.attn_k.weight" {
		t.Fatalf("only_a %v only_b %v", d.OnlyA, d.OnlyB)
	}
	var q *diffEntry
	for i := range d.Changed {
		if d.Changed[i].Name == "blk.0.attn_q.weight" {
			q = &d.Changed[i]
		}
	}
	if q == nil {
		t.Fatalf("promoted entry not reported: %+v", d.Changed)
	}
	fields := map[string]bool{}
	for _, f := range q.Changes {
		fields[f.Field] = true
	}
	for _, f := range []string{"dtype", "rotation", "act_bits", "data", "qerr"} {
		if !fields[f] {
			t.Errorf("blk.0.attn_q.weight changes lack %q: %+v", f, q.Changes)
		}
	}

	// An entry that differs only in its activation clip shows that one field.
	c := filepath.Join(dir, "c.orkpack")
	verifytest.WritePack(t, c, verifytest.PackOptions{Skip: "blk.1.attn_k.weight", Mutate: func(w *pack.Weight) bool {
		if w.Name == "blk.2.ffn_up.weight" {
			w.ActClip = 0.75
		}
		return false
	}})
	out, _ = runPackCLI(t, "diff", "--json", a, c)
	var dc diffJSON
	if err := json.Unmarshal([]byte(out), &dc); err != nil {
		t.Fatal(err)
	}
	if len(dc.Changed) != 1 || dc.Changed[0].Name != "blk.2.ffn_up.weight" || len(dc.Changed[0].Changes) != 1 ||
		dc.Changed[0].Changes[0].Field != "act_clip" || dc.Changed[0].Changes[0].A != 1.0 || dc.Changed[0].Changes[0].B != 0.75 {
		t.Fatalf("clip-only change: %+v", dc.Changed)
	}
	same, code := runPackCLI(t, "diff", a, a)
	if code != 0 || !strings.Contains(same, "0 only in A, 0 only in B, 0 changed, 35 identical") {
		t.Fatalf("diff of a pack with itself: %s", same)
	}
	text, _ := runPackCLI(t, "diff", a, b)
	t.Log(text)
}
