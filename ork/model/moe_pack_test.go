package model

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"orkpipe/ork/pack"
)

func TestGGUFSourceExpertSlices(t *testing.T) {
	c := moeConfig()
	path, ws := writeMoEModel(t, c, 11, 1)
	_, src := openMoE(t, path)
	ctx := context.Background()
	lin, ok, err := src.Linear(ctx, "blk.1.ffn_down_exps.weight#3")
	if err != nil || !ok {
		t.Fatalf("expert slice: ok %v, err %v", ok, err)
	}
	d := lin.(*Dense)
	want := ws["blk.1.ffn_down_exps.weight"][3*c.NEmbd*c.NFF : 4*c.NEmbd*c.NFF]
	if d.N != c.NEmbd || d.K != c.NFF || len(d.W) != len(want) {
		t.Fatalf("slice is %dx%d with %d values", d.N, d.K, len(d.W))
	}
	for i := range want {
		if d.W[i] != want[i] {
			t.Fatalf("value %d of expert 3: %v, want %v", i, d.W[i], want[i])
		}
	}
	if k, n, ok := src.Shape("blk.0.ffn_up_exps.weight#2"); !ok || k != c.NEmbd || n != c.NFF {
		t.Errorf("Shape of an expert slice: %d, %d, %v", k, n, ok)
	}
	for _, bad := range []string{"blk.0.ffn_up_exps.weight#4", "blk.0.ffn_up_exps.weight", "blk.0.attn_q.weight#0", "blk.0.ffn_up_exps.weight#01", "blk.0.ffn_up_exps.weight#x"} {
		if _, _, ok := src.Shape(bad); ok {
			t.Errorf("Shape(%q) is ok", bad)
		}
		if _, ok, err := src.Linear(ctx, bad); err == nil || ok {
			t.Errorf("Linear(%q): ok %v, err %v; want an error", bad, ok, err)
		} else {
			t.Logf("Linear(%q): %v", bad, err)
		}
	}
	if _, ok, err := src.Linear(ctx, "blk.0.no_such.weight#1"); ok || err != nil {
		t.Errorf("a missing tensor's expert: ok %v, err %v; want absent", ok, err)
	}
}

// expertSchemes packs every expert slice of an MoE model of shape c by sc.
func expertSchemes(c Config, sc scheme) map[string]scheme {
	schemes := map[string]scheme{}
	for l := 0; l < c.NLayer; l++ {
		for _, w := range []string{"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"} {
			for e := 0; e < c.NExpert; e++ {
				schemes["blk."+strconv.Itoa(l)+"."+w+".weight#"+strconv.Itoa(e)] = sc
			}
		}
	}
	return schemes
}

// TestMoEPackEmulation quantizes every expert slice of the MoE model into a pack (entries
// "<tensor>#<e>", int8 rotated, W8A8) and runs the model with the pack: the expert Linears are the
// pack's emulated entries, the router stays float, and the logits stay close to the float model's.
func TestMoEPackEmulation(t *testing.T) {
	c := moeConfig()
	path, _ := writeMoEModel(t, c, 21, 1)
	fm, src := openMoE(t, path)
	ps, p := testPackSource(t, src, expertSchemes(c, scheme{dtype: pack.I8Rot, group: 32, rotate: true}))
	if len(p.Entries()) != 24 {
		t.Fatalf("pack has %d entries, want 2 layers x 3 tensors x 4 experts", len(p.Entries()))
	}
	pm, err := NewModel(fm.Cfg, ps)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := LoadLayer(ctx, &pm.Cfg, ps, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Router.(*Dense); !ok {
		t.Errorf("router is %T, want the float weight", l.Router)
	}
	for e, ex := range l.Experts {
		for _, lin := range []Linear{ex.Gate, ex.Up, ex.Down} {
			if em, ok := lin.(*Emulated); !ok || em.ActBits != 8 {
				t.Fatalf("expert %d: %T, want the pack's emulated W8A8 entry", e, lin)
			}
		}
	}
	tokens := make([]int32, 24)
	for i := range tokens {
		tokens[i] = int32((i*7 + 3) % c.NVocab)
	}
	want, err := fm.Forward(ctx, tokens)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pm.Forward(ctx, tokens)
	if err != nil {
		t.Fatal(err)
	}
	rel := relErr(got, want)
	t.Logf("W8A8 expert pack vs float: relative logit error %.4g", rel)
	if rel == 0 || rel > 0.05 {
		t.Fatalf("relative logit error %g: want the small nonzero error of int8 experts", rel)
	}
}

// FuzzSplitExpert: an expert slice name either is refused or round-trips through pack.ExpertName; a
// name without '#' is a plain tensor name.
func FuzzSplitExpert(f *testing.F) {
	for _, s := range []string{"blk.0.ffn_up_exps.weight#3", "blk.0.attn_q.weight", "x#", "#1", "a#01", "a#-1", "a#1#2", "a#+1", "a#99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		base, e, isExpert, err := splitExpert(name)
		switch {
		case err != nil:
			if isExpert || !strings.Contains(name, "#") {
				t.Fatalf("%q: error %v with isExpert %v", name, err, isExpert)
			}
		case !isExpert:
			if base != name || strings.Contains(name, "#") {
				t.Fatalf("%q: plain name returned as %q", name, base)
			}
		default:
			if e < 0 || pack.ExpertName(base, e) != name {
				t.Fatalf("%q: split into %q and %d, which names %q", name, base, e, pack.ExpertName(base, e))
			}
		}
	})
}
