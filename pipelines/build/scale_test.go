package build_test

import (
	"context"
	"testing"

	"orkpipe/pipelines/build"
	"orkpipe/pipelines/recipe"
)

// TestScaleParams: a 4-bit GPTQ weight's finalize parameters carry scale_sign search by default and
// nothing with scale_sign positive; an RTN weight's only when its scheme says search; scale_search gptq reaches GPTQ weights; a twin promoted to an 8-bit dtype
// (per channel, symmetric codes) drops both, and one promoted to I4_ROT_A8 keeps them.
func TestScaleParams(t *testing.T) {
	const q, down = "blk.0.attn_q.weight", "blk.0.ffn_down.weight"
	for _, tc := range []struct {
		name                 string
		sets                 []string
		search, sign         string // attn_q's (scheme 1)
		downSign             string // ffn_down's (scheme 0)
		twinSearch, twinSign string // attn_q's promoted twin
	}{
		{"defaults", nil, "", "search", "search", "", ""},
		{"positive", []string{"schemes.1.scale_sign=positive"}, "", "", "search", "", ""},
		{"rtn", []string{"schemes.1.method=rtn"}, "", "", "search", "", ""},
		{"rtn search", []string{"schemes.1.method=rtn", "schemes.1.scale_sign=search"}, "", "search", "search", "", ""},
		{"gptq search, I8_ROT twin", []string{"schemes.1.scale_search=gptq", `promote.match=blk\.\d+\.attn_q\.weight`, "promote.to=I8_ROT", "promote.budget_mib=1"},
			"gptq", "search", "search", "", ""},
		{"gptq search, I4_ROT_A8 twin", []string{"schemes.1.scale_search=gptq", `promote.match=blk\.\d+\.attn_q\.weight`, "promote.to=I4_ROT_A8", "promote.budget_mib=1"},
			"gptq", "search", "search", "gptq", "search"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := recipe.Load(writeRecipe(t, "oneshot"), tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			tg, err := build.New(rec, build.WithMemoryBudget(2<<30))
			if err != nil {
				t.Fatal(err)
			}
			fin, promote, err := tg.FinalizeParams(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if p := fin[q]; p.ScaleSearch != tc.search || p.ScaleSign != tc.sign {
				t.Errorf("%s: scale_search %q, scale_sign %q; want %q, %q", q, p.ScaleSearch, p.ScaleSign, tc.search, tc.sign)
			}
			if p := fin[down]; p.ScaleSign != tc.downSign {
				t.Errorf("%s: scale_sign %q, want %q", down, p.ScaleSign, tc.downSign)
			}
			if wantTwin := len(tc.sets) > 2; (promote[q] != nil) != wantTwin {
				t.Fatalf("%s: promoted twin %v, want one %v", q, promote[q], wantTwin)
			}
			if p := promote[q]; p != nil && (p.ScaleSearch != tc.twinSearch || p.ScaleSign != tc.twinSign) {
				t.Errorf("%s twin (%s): scale_search %q, scale_sign %q; want %q, %q", q, p.DType, p.ScaleSearch, p.ScaleSign, tc.twinSearch, tc.twinSign)
			}
		})
	}
}
