package reporthtml_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"orkpipe/ork/model"
	"orkpipe/stages"
	"orkpipe/stages/reporthtml"
)

// sampleReport is a report.json as the report stage writes it (stages.Report, so that a renamed
// field shows here), with every field the pages draw set: 4 layers of a llama block, a promoted
// entry, an entry outside the blocks whose name needs escaping, a screen with the per-token KLD
// distribution, provenance and, with experts > 0, expert slices of the FFN.
func sampleReport(t testing.TB, name string, shift float64, experts int) []byte {
	t.Helper()
	rep := stages.Report{Name: name, Pack: stages.ReportFile{Digest: "blake3:" + strings.Repeat("ab", 32), Size: 123456789},
		Stub: stages.ReportFile{Digest: "blake3:" + strings.Repeat("cd", 32), Size: 987654321}, Board: "rk3588",
		DomainCapacity: 3900<<20 - 32<<20, Totals: stages.ReportTotals{ByDType: map[string]int{}}}
	add := func(w stages.ReportWeight) {
		w.Resident, w.Domain = w.Bytes, len(rep.Weights)%3
		rep.Weights = append(rep.Weights, w)
		rep.Totals.Weights++
		rep.Totals.ByDType[w.DType]++
		rep.Totals.Resident += w.Resident
	}
	kinds := []string{"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}
	if experts > 0 {
		kinds = []string{"attn_q", "attn_k", "attn_v", "attn_output"}
	}
	for l := 0; l < 4; l++ {
		for i, k := range kinds {
			w := stages.ReportWeight{Name: fmt.Sprintf("blk.%d.%s.weight", l, k), DType: "I4_NATIVE", N: 512, K: 512, Group: 32,
				Rotation: "hadamard(block=64,seed=7)", ActBits: 4, ActClip: 1, QErr: 0.05 + 0.01*float64(i) + 0.002*float64(l) + shift, Bytes: 1 << 20}
			if l == 2 && k == "attn_v" {
				w.DType, w.PromotedFrom, w.ActBits, w.Bytes = "I8_ROT", "I4_NATIVE", 8, 2<<20
			}
			add(w)
		}
		for _, k := range []string{"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"} {
			for e := 0; e < experts; e++ {
				add(stages.ReportWeight{Name: fmt.Sprintf("blk.%d.%s.weight#%d", l, k, e), DType: "I4", N: 256, K: 512, Group: 32,
					Rotation: "none", ActBits: 8, ActClip: 0.9, QErr: 0.07 + 0.001*float64(e) + shift, Bytes: 1 << 19})
				rep.Totals.ExpertEntries++
			}
		}
	}
	if experts > 0 {
		rep.Totals.ExpertTensors = 12
	}
	add(stages.ReportWeight{Name: `output<&">.weight`, DType: "I8", N: 32000, K: 512, Rotation: "none", ActBits: 8, ActClip: 1, QErr: 0.01, Bytes: 16 << 20})
	for d := 0; d < 3; d++ {
		dom := stages.ReportDomain{Domain: d}
		for _, w := range rep.Weights {
			if w.Domain == d {
				dom.Entries++
				dom.Resident += w.Resident
			}
		}
		rep.Domains = append(rep.Domains, dom)
	}
	pct := make([]float64, 101)
	for i := range pct {
		pct[i] = 1e-4 * math.Pow(10, 4*float64(i)/100) * (1 + shift)
	}
	rep.Screen = &stages.ScreenResult{Ctx: 128, Chunks: 14, Tokens: 1883, Scored: 882, PPL: 7.997 + shift, PPLErr: 0.85, BasePPL: 6.845, BasePPLErr: 0.74,
		PPLRatio: (7.997 + shift) / 6.845, KLDMean: 0.214, SameTop: 0.7857, SameTopErr: 0.0138, Gates: stages.ScreenGates{MaxPPLRatio: 1.5},
		KLD: &model.KLDStats{Mean: 0.214, MeanErr: 0.0123, Median: pct[50], P99: pct[99], Max: pct[100]}, KLDPercentiles: pct}
	rep.Verify = stages.VerifyResult{PackEntries: len(rep.Weights), PackIndex: "blake3:" + strings.Repeat("ef", 32), Board: "rk3588", Domains: 3, MaxDomains: 16,
		StubTensors: 60, StubOwned: len(rep.Weights), StubHeader: "blake3:" + strings.Repeat("12", 32)}
	rep.Provenance = stages.ReportProvenance{Overrides: []string{"calibration.sequences=23"}, Deps: []stages.ResourceDescriptor{
		{Name: "source-model", URI: "file:///models/stories260K.gguf", Digest: stages.DigestSet{"blake3": strings.Repeat("34", 32)}, Annotations: map[string]any{"size": 1185376}},
		{Name: "orkpipe", Digest: stages.DigestSet{"blake3": strings.Repeat("56", 32)}, Annotations: map[string]any{"size": 32034150, "vcs.revision": "2a70c3a"}},
	}}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// withModel adds a model description (stages.ProvenanceModel) to a report.json.
func withModel(t *testing.T, b []byte) []byte {
	t.Helper()
	var rep stages.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	rep.Model = &stages.ProvenanceModel{Name: "Qwen3.6-27B", Family: "Qwen3.6", License: "apache-2.0", Architecture: "qwen35", ParamSize: "27B",
		Precision: "int4+int8", Quantization: "gptq+rtn", BoardProfile: "rk3588"}
	out, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// withRouting adds MoE routing counts (the field the report does not write yet) to a report.json.
func withRouting(t *testing.T, b []byte, layers, experts int) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var rt []map[string]any
	for l := 0; l < layers; l++ {
		counts := make([]int64, experts)
		for e := range counts {
			counts[e] = int64(100 * (e + 1) * (l + 1))
		}
		rt = append(rt, map[string]any{"layer": l, "counts": counts})
	}
	m["routing"] = rt
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRender(t *testing.T) {
	for _, c := range []struct {
		name    string
		report  []byte
		want    []string // fragments the page must hold
		notWant []string
	}{
		{"dense", sampleReport(t, "dense", 0, 0), []string{
			"<h1>dense</h1>", "blk.3.ffn_down.weight", "promoted from I4_NATIVE", "Outlined", "output&lt;&amp;&#34;&gt;.weight",
			"3.78 GiB", "file:///models/stories260K.gguf", "vcs.revision 2a70c3a", "calibration.sequences=23", "KL divergence per scored token",
			"gate: 1.5 × float", "7.9970 ± 0.8500", "78.57%", `aria-label="IOMMU domain plan"`},
			[]string{"Experts per layer", "<script", "output<&", "model license", "report of"}},
		{"described", withModel(t, sampleReport(t, "dense", 0, 0)), []string{
			"orkpack build report of Qwen3.6-27B (qwen35, 27B params, int4&#43;int8, gptq&#43;rtn) for board rk3588", "<b>apache-2.0</b><span>model license</span>"}, nil},
		{"moe", sampleReport(t, "moe", 0, 8), []string{"Experts per layer", "96 expert slices of 12 MoE tensors", "This report.json has no routing counts",
			"qerr (mean over a cell&#39;s expert slices)", "blk.0.ffn_gate_exps.weight: 8 expert slices"}, nil},
		{"moe routed", withRouting(t, sampleReport(t, "moe", 0, 8), 4, 8), []string{"share of the layer", "routed 800 tokens (22.22% of the layer&#39;s)"}, nil},
		// A column per expert named, not per index up to the largest (2e9 of them: 32 GB of labels).
		{"moe expert index", bytes.ReplaceAll(sampleReport(t, "moe", 0, 2), []byte(`_exps.weight#1"`), []byte(`_exps.weight#2000000000"`)),
			[]string{">e0<", ">e2000000000<", "blk 3 expert 2000000000"}, []string{">e1<"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			page, err := reporthtml.Render(c.report)
			if err != nil {
				t.Fatal(err)
			}
			again, err := reporthtml.Render(append([]byte(nil), c.report...))
			if err != nil || !bytes.Equal(page, again) {
				t.Fatalf("two renders of the same report.json differ (err %v)", err)
			}
			if err := reporthtml.Check(page); err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !bytes.Contains(page, []byte(w)) {
					t.Errorf("page lacks %q", w)
				}
			}
			for _, w := range c.notWant {
				if bytes.Contains(page, []byte(w)) {
					t.Errorf("page holds %q", w)
				}
			}
		})
	}
}

func TestRenderRefuses(t *testing.T) {
	good := sampleReport(t, "x", 0, 0)
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	for _, c := range []struct {
		name, field string
		report      []byte
	}{
		{"not json", "", []byte("{")},
		{"no name", "name", edit(func(m map[string]any) { m["name"] = "" })},
		{"no board", "board", edit(func(m map[string]any) { delete(m, "board") })},
		{"no weights", "weights", edit(func(m map[string]any) { m["weights"] = []any{} })},
		{"bad weight", "weights[0]", edit(func(m map[string]any) { m["weights"].([]any)[0].(map[string]any)["dtype"] = "" })},
		{"percentiles", "screen.kld_percentiles", edit(func(m map[string]any) {
			m["screen"].(map[string]any)["kld_percentiles"] = []float64{3, 2, 1}
		})},
		{"routing", "routing[0]", edit(func(m map[string]any) { m["routing"] = []any{map[string]any{"layer": 0}} })},
		{"domain", "domains[1]: domain -7", edit(func(m map[string]any) { m["domains"].([]any)[1].(map[string]any)["domain"] = -7 })},
		{"domain bytes", "domains[0]", edit(func(m map[string]any) { m["domains"].([]any)[0].(map[string]any)["resident_bytes"] = -1 })},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := reporthtml.Render(c.report)
			if !errors.Is(err, reporthtml.ErrReport) || !strings.Contains(err.Error(), c.field) {
				t.Errorf("error %v, want ErrReport naming %q", err, c.field)
			}
		})
	}
}

func TestRenderDiff(t *testing.T) {
	a, b := sampleReport(t, "a", 0, 0), sampleReport(t, "b", 0.01, 0)
	page, err := reporthtml.RenderDiff(a, b, "out/a", "out/b")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := reporthtml.RenderDiff(a, b, "out/a", "out/b")
	if !bytes.Equal(page, again) {
		t.Fatal("two renders differ")
	}
	for _, w := range []string{"<h1>a vs b</h1>", "+0.01000", "qerr B − A", "A pack", "B pack", "Largest changes", "8.0070"} {
		if !bytes.Contains(page, []byte(w)) {
			t.Errorf("diff page lacks %q", w)
		}
	}
	// Entries in one build only are named.
	moe := sampleReport(t, "m", 0, 2)
	page, err = reporthtml.RenderDiff(a, moe, "a", "m")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Only in A: <span class=\"mono\">blk.0.ffn_gate.weight", "Only in B: <span class=\"mono\">blk.0.ffn_gate_exps.weight#0"} {
		if !bytes.Contains(page, []byte(w)) {
			t.Errorf("diff page lacks %q", w)
		}
	}
	if _, err := reporthtml.RenderDiff(a, []byte("{}"), "a", "broken"); !errors.Is(err, reporthtml.ErrReport) || !strings.Contains(err.Error(), "B (broken)") {
		t.Errorf("error %v, want ErrReport naming B", err)
	}
}

func TestRenderTimeline(t *testing.T) {
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tl := &reporthtml.Timeline{Target: "demo", Start: start, Duration: 9 * time.Second, Jobs: 2, Budget: 1 << 30, Executed: 4, Cached: 80, Failed: 1,
		Nodes: []reporthtml.TimedNode{
			{ID: "tokenize", Stage: "tokenize", Start: 0, End: time.Second, Mem: 64 << 20},
			{ID: "calibrate[0,1)", Stage: "calibrate", Start: time.Second, End: 5 * time.Second, Mem: 600 << 20},
			{ID: "finalize:blk.0.attn_q.weight", Stage: "finalize", Start: 5 * time.Second, End: 6 * time.Second, Mem: 100 << 20},
			{ID: "finalize:blk.0.attn_k.weight", Stage: "finalize", Start: 5 * time.Second, End: 8 * time.Second, Mem: 100 << 20},
			{ID: "screen", Stage: "screen", Start: 8 * time.Second, End: 9 * time.Second, Mem: 300 << 20, Failed: true},
		}}
	page, err := reporthtml.RenderTimeline(tl)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Build timeline: demo", "2025-01-02 03:04:05 UTC", "4 nodes executed, 80 served from the cache, 1 failed", "slot 2",
		"calibrate[0,1) (calibrate): 4.00 s", `class="failed"`, "budget 1.00 GiB", "peak declared 600.00 MiB of 1.00 GiB"} {
		if !bytes.Contains(page, []byte(w)) {
			t.Errorf("timeline lacks %q", w)
		}
	}
	if bytes.Contains(page, []byte("slot 3")) {
		t.Error("three slots for nodes that never overlap by more than two")
	}
	bad := *tl
	bad.Nodes = []reporthtml.TimedNode{{ID: "x", Start: 2 * time.Second, End: time.Second}}
	if _, err := reporthtml.RenderTimeline(&bad); err == nil {
		t.Error("a node ending before it starts was drawn")
	}
	empty := reporthtml.Timeline{Target: "demo", Start: start, Cached: 86}
	page, err = reporthtml.RenderTimeline(&empty)
	if err != nil || !bytes.Contains(page, []byte("every output came from the cache")) {
		t.Errorf("all-cached timeline: %v", err)
	}
}

func TestCheck(t *testing.T) {
	head := `<!DOCTYPE html><html><head><title>t</title></head><body><main>`
	tail := `</main></body></html>`
	for _, c := range []struct {
		name, body string
		ok         bool
	}{
		{"plain", `<p>x</p><svg viewBox="0 0 1 1"><title>hover</title></svg><a href="#x">x</a>`, true},
		{"script", `<script>alert(1)</script>`, false},
		{"external link", `<a href="https://example.com/">x</a>`, false},
		{"relative link", `<a href="timeline.html">x</a>`, false},
		{"image", `<img src="data:,">`, false},
		{"svg image", `<svg viewBox="0 0 1 1"><image href="x.png"/></svg>`, false},
		{"no viewBox", `<svg width="10"></svg>`, false},
		{"handler", `<p onclick="x()">x</p>`, false},
		{"style url", `<p style="background: url(x.png)">x</p>`, false},
		{"stylesheet", `<link rel="stylesheet" href="x.css">`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := reporthtml.Check([]byte(head + c.body + tail))
			if (err == nil) != c.ok {
				t.Errorf("Check: %v, want ok %v", err, c.ok)
			}
		})
	}
	if err := reporthtml.Check([]byte(`<p>no document</p>`)); err == nil {
		t.Error("a fragment without title and main passed")
	}
}

// FuzzRender: any report.json either is refused with ErrReport or renders a page that passes Check
// (Render checks what it returns), twice the same.
func FuzzRender(f *testing.F) {
	f.Add(sampleReport(f, "seed", 0, 0))
	f.Add(sampleReport(f, "moe", 0.01, 2))
	f.Add([]byte(`{"name":"x","board":"b","weights":[{"name":"blk.0.a.weight#1","dtype":"I4","domain":0}],"routing":[{"layer":0,"counts":[0,0]}]}`))
	f.Add([]byte(`{"name":"x","board":"b","weights":[{"name":"blk.0.a.weight#2000000000","dtype":"I4","domain":0}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		page, err := reporthtml.Render(b)
		if err != nil {
			if !errors.Is(err, reporthtml.ErrReport) {
				t.Fatalf("error %v does not wrap ErrReport", err)
			}
			return
		}
		again, err := reporthtml.Render(b)
		if err != nil || !bytes.Equal(page, again) {
			t.Fatalf("second render differs (%v)", err)
		}
	})
}
