package progress_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/progress"
)

func TestCostsFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := progress.CostsFile(dir, "qwen35/27b")
	if want := filepath.Join(dir, "qwen35%2F27b", "costs"); path != want {
		t.Fatalf("CostsFile = %s, want %s", path, want)
	}
	if got, err := progress.ReadCosts(path, "qwen35/27b", "gguf 28000000000"); got != nil || err != nil {
		t.Fatalf("a missing file: %v, %v; want no costs and no error", got, err)
	}
	then := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	now := then.Add(24 * time.Hour)
	old := []progress.KindCost{
		{Stage: "finalize", Kind: "finalize:blk.#.attn_q.weight", Mean: 41250 * time.Millisecond, Nodes: 64, Measured: then},
		{Stage: "calibrate", Kind: "calibrate[#,#)", Mean: 103 * time.Second, Nodes: 64, Measured: then},
	}
	measured := []progress.KindCost{
		{Stage: "calibrate", Kind: "calibrate[#,#)", Mean: 98 * time.Second, Nodes: 2, Measured: now},
		{Stage: "tile", Kind: "tile:blk.#.attn_q.weight", Mean: 700 * time.Millisecond, Nodes: 2, Measured: now},
	}
	merged := progress.MergeCosts(old, measured)
	want := []progress.KindCost{measured[0], old[0], measured[1]} // sorted by stage and kind
	if !reflect.DeepEqual(merged, want) {
		t.Fatalf("MergeCosts:\n%v\nwant\n%v", merged, want)
	}
	const big, small = "gguf 28000000000", "gguf 9000000000"
	keep := func(source string, costs []progress.KindCost) {
		t.Helper()
		if err := progress.KeepCosts(path, "qwen35/27b", source, costs); err != nil {
			t.Fatal(err)
		}
	}
	read := func(source string) []progress.KindCost {
		t.Helper()
		got, err := progress.ReadCosts(path, "qwen35/27b", source)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	keep(big, old)
	keep(small, measured[:1])
	keep(big, measured)
	if got := read(big); !reflect.DeepEqual(got, want) {
		t.Errorf("read back:\n%v\nwant\n%v", got, want)
	}
	if got := read(small); !reflect.DeepEqual(got, measured[:1]) {
		t.Errorf("the other source's costs:\n%v\nwant\n%v", got, measured[:1])
	}
	if got := read("synth {}"); got != nil {
		t.Errorf("a source never built: %v, want none", got)
	}
	// Sources beyond the newest eight drop out, the oldest first.
	for i := range 8 {
		keep(fmt.Sprint("gguf ", i), measured[:1])
	}
	if read(small) != nil || read(big) != nil || read("gguf 0") == nil || read("gguf 7") == nil {
		t.Error("after eight newer sources, the two oldest are still kept or a newer one is not")
	}
	// The costs file is not a build record: explain's history lists only the records.
	if _, err := engine.History(t.Context(), dir, "qwen35/27b", 20); err == nil || !strings.Contains(err.Error(), "build it first") {
		t.Errorf("History of a target with only a costs file: %v, want no record", err)
	}
}

// A damaged costs file reads as an error that names it and what is wrong, and KeepCosts replaces it
// with the build's costs (and says so).
func TestReadCostsRejects(t *testing.T) {
	const kind = `{"stage":"tile","kind":"k","mean_ms":5,"nodes":1,"measured":"2026-12-06T00:00:00Z"}`
	for name, tc := range map[string]struct{ text, want string }{
		"not JSON":      {`{"version":1,`, "unexpected EOF"},
		"version":       {`{"version":2,"target":"t","sources":[]}`, "version 2, want 1"},
		"target":        {`{"version":1,"target":"u","sources":[]}`, `target "u", want "t"`},
		"unknown field": {`{"version":1,"target":"t","kinds":[]}`, `unknown field "kinds"`},
		"no nodes": {`{"version":1,"target":"t","sources":[{"source":"s","kinds":[{"stage":"tile","kind":"tile:blk.#.w","mean_ms":5,"nodes":0,"measured":"2026-12-06T00:00:00Z"}]}]}`,
			`sources[0].kinds[0] ("tile:blk.#.w"): want a stage, 0 <= mean_ms <= 1099511627776, nodes >= 1 and tokens >= 0, have "tile", 5, 0, 0`},
		"negative mean": {`{"version":1,"target":"t","sources":[{"source":"s","kinds":[{"stage":"tile","kind":"k","mean_ms":-1,"nodes":1,"measured":"2026-12-06T00:00:00Z"}]}]}`,
			"0 <= mean_ms"},
		"mean too long": {`{"version":1,"target":"t","sources":[{"source":"s","kinds":[{"stage":"tile","kind":"k","mean_ms":9223372036854775,"nodes":1,"measured":"2026-12-06T00:00:00Z"}]}]}`,
			"0 <= mean_ms <= 1099511627776,"},
		"negative tokens": {`{"version":1,"target":"t","sources":[{"source":"s","kinds":[{"stage":"calibrate","kind":"k","mean_ms":1,"nodes":1,"measured":"2026-12-06T00:00:00Z","tokens":-5}]}]}`,
			"tokens >= 0"},
		"no stage": {`{"version":1,"target":"t","sources":[{"source":"s","kinds":[{"stage":"","kind":"k","mean_ms":1,"nodes":1,"measured":"2026-12-06T00:00:00Z"}]}]}`,
			"want a stage"},
		"a kind twice": {`{"version":1,"target":"t","sources":[{"source":"s","kinds":[` + kind + `,` + kind + `]}]}`,
			`sources[0].kinds[1]: stage "tile" kind "k" listed twice`},
		"a source twice": {`{"version":1,"target":"t","sources":[{"source":"s","kinds":[` + kind + `]},{"source":"s","kinds":[]}]}`,
			`sources[1]: source "s" listed twice`},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "costs")
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := progress.ReadCosts(path, "t", "s")
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadCosts = %v, %v; want an error naming %s and %q", got, err, path, tc.want)
			}
			costs := []progress.KindCost{{Stage: "tile", Kind: "k", Mean: time.Second, Nodes: 1, Measured: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}}
			if err := progress.KeepCosts(path, "t", "s", costs); err == nil || !strings.Contains(err.Error(), "replaced by this build's costs") {
				t.Errorf("KeepCosts over the damaged file: %v, want it replaced and reported", err)
			}
			if got, err := progress.ReadCosts(path, "t", "s"); err != nil || !reflect.DeepEqual(got, costs) {
				t.Errorf("after KeepCosts: %v, %v; want %v", got, err, costs)
			}
		})
	}
}

// Builds that keep their costs in the same file at once lose none of each other's kinds.
func TestKeepCostsConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history", "t", "costs")
	const builds = 24
	var wg sync.WaitGroup
	errs := make([]error, builds)
	for i := range builds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kind := fmt.Sprintf("finalize:blk.#.w%d.weight", i)
			errs[i] = progress.KeepCosts(path, "t", "s", []progress.KindCost{{Stage: "finalize", Kind: kind, Mean: time.Second, Nodes: 1}})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("build %d: %v", i, err)
		}
	}
	got, err := progress.ReadCosts(path, "t", "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != builds {
		t.Errorf("%d kinds kept by %d builds at once, want every one: %v", len(got), builds, got)
	}
}

// FuzzReadCosts: any bytes either fail to read or read as costs that keep and read back the same.
func FuzzReadCosts(f *testing.F) {
	f.Add([]byte(`{"version":1,"target":"t","sources":[{"source":"s","kinds":[{"stage":"calibrate","kind":"calibrate[#,#)","mean_ms":98000,"nodes":2,"measured":"2026-12-06T09:00:00Z"}]}]}`))
	f.Add([]byte(`{"version":1,"target":"t","sources":[{"source":"s","kinds":null},{"source":"u","kinds":[]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "costs")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		costs, err := progress.ReadCosts(path, "t", "s")
		if err != nil {
			return
		}
		if err := progress.KeepCosts(path, "t", "s", costs); err != nil {
			t.Fatal(err)
		}
		again, err := progress.ReadCosts(path, "t", "s")
		if err != nil {
			t.Fatalf("costs kept from a read file do not read: %v", err)
		}
		if len(costs) == 0 && len(again) == 0 {
			return
		}
		for i := range costs {
			costs[i].Measured = costs[i].Measured.UTC()
		}
		sort.Slice(costs, func(i, j int) bool { // as KeepCosts keeps them
			return costs[i].Stage < costs[j].Stage || costs[i].Stage == costs[j].Stage && costs[i].Kind < costs[j].Kind
		})
		if !reflect.DeepEqual(costs, again) {
			t.Errorf("read back %v, want %v", again, costs)
		}
	})
}

func TestEstimate(t *testing.T) {
	costs := []progress.KindCost{
		{Stage: "calibrate", Kind: "calibrate[#,#)", Mean: 100 * time.Second, Nodes: 2},
		{Stage: "finalize", Kind: "finalize:blk.#.ffn_down.weight", Mean: 30 * time.Second, Nodes: 1},
		{Stage: "finalize", Kind: "finalize:blk.#.attn_q.weight", Mean: 10 * time.Second, Nodes: 3},
	}
	nodes := func(idStage ...string) []engine.NodeStatus {
		var out []engine.NodeStatus
		for i := 0; i < len(idStage); i += 2 {
			out = append(out, engine.NodeStatus{ID: idStage[i], Stage: idStage[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		nodes     []engine.NodeStatus
		left      time.Duration
		lower, ok bool
	}{
		{"kinds and a stage", nodes("calibrate[0,1)", "calibrate", "calibrate[1,2)", "calibrate",
			"finalize:blk.0.ffn_down.weight", "finalize", "finalize:blk.0.ffn_up.weight", "finalize"),
			// ffn_up has no cost of its own: finalize's mean, (30 + 3 x 10) / 4 = 15 s.
			245 * time.Second, false, true},
		{"a stage without costs", nodes("calibrate[0,1)", "calibrate", "screen", "screen"), 100 * time.Second, true, true},
		{"only stages without costs", nodes("screen", "screen"), 0, true, false},
		{"no nodes", nil, 0, false, false},
	} {
		e := progress.Estimate(costs, 2, nil, tc.nodes)
		if e.Left != tc.left || e.Lower != tc.lower || e.OK != tc.ok {
			t.Errorf("%s: Estimate = %v, %v, %v; want %v, %v, %v", tc.name, e.Left, e.Lower, e.OK, tc.left, tc.lower, tc.ok)
		}
	}
	if e := progress.Estimate(nil, 2, nil, nodes("calibrate[0,1)", "calibrate")); e.OK {
		t.Error("an estimate without costs")
	}
}

// TestEstimateModeled: a node of a kind no earlier build kept is estimated by its modeled cost: over
// the cores with no rate; at the host's rate for its stage and size class when one was kept; at the
// rate over every stage of its size class when its stage has none; never at a rate of the other size
// class. A kind kept wins over the model.
func TestEstimateModeled(t *testing.T) {
	costs := []progress.KindCost{{Stage: "finalize", Kind: "finalize:blk.#.ffn_down.weight", Mean: 30 * time.Second, Nodes: 1}}
	big := []engine.NodeStatus{
		{ID: "calibrate[0,1)", Stage: "calibrate", CostNS: int64(200 * time.Second)},
		{ID: "finalize:blk.0.ffn_down.weight", Stage: "finalize", CostNS: int64(80 * time.Second)},
		{ID: "finalize:blk.0.ffn_up.weight", Stage: "finalize", CostNS: int64(16 * time.Second)},
	}
	small := []engine.NodeStatus{{ID: "tile:blk.0.ffn_up.weight", Stage: "tile", CostNS: int64(500 * time.Millisecond)}}
	rates := []progress.StageRate{
		{Stage: "calibrate", Large: true, Share: 150 * time.Second, Cost: 100 * time.Second}, // 1.5
		{Stage: progress.AnyStage, Large: true, Share: 60 * time.Second, Cost: 100 * time.Second},
		{Stage: progress.AnyStage, Share: 4 * time.Second, Cost: 1 * time.Second}, // small nodes: 4
	}
	for _, tc := range []struct {
		name                 string
		costs                []progress.KindCost
		rates                []progress.StageRate
		nodes                []engine.NodeStatus
		left                 time.Duration
		kept, modeled, rated int
	}{
		{"the reference host's speed on 2 cores", nil, nil, big, (200 + 80 + 16) * time.Second / 2, 0, 3, 0},
		{"a kind kept, the rest over the cores", costs, nil, big, (100+16/2.0)*time.Second + 30*time.Second, 1, 2, 0},
		// calibrate at its own 1.5, finalize at every stage's 0.6.
		{"the host's rates", nil, rates, big, 300*time.Second + 96*6*time.Second/10, 0, 3, 3},
		{"a small node at the small nodes' rate", nil, rates, small, 2 * time.Second, 0, 1, 1},
		{"a small node never at a large rate", nil, rates[:2], small, 250 * time.Millisecond, 0, 1, 0},
	} {
		e := progress.Estimate(tc.costs, 2, tc.rates, tc.nodes)
		if !e.OK || e.Lower || e.Left != tc.left || e.Kept != tc.kept || e.Modeled != tc.modeled || e.Rated != tc.rated {
			t.Errorf("%s: Estimate = %+v; want left %v, kept %d, modeled %d, rated %d", tc.name, e, tc.left, tc.kept, tc.modeled, tc.rated)
		}
	}
}

// TestScaleTokens: StampTokens marks the kinds of the stages named with the build's tokens; kept and
// read back, ScaleTokens scales those kinds' means to another build's tokens (bounded), and leaves
// the others, and every kind for a build that names no tokens, as they were.
func TestScaleTokens(t *testing.T) {
	at := time.Date(2026, 12, 6, 23, 0, 0, 0, time.UTC)
	measured := progress.StampTokens([]progress.KindCost{
		{Stage: "calibrate", Kind: "calibrate[#,#)", Mean: 100 * time.Second, Nodes: 64, Measured: at},
		{Stage: "finalize", Kind: "finalize:blk.#.ffn_down.weight", Mean: 50 * time.Second, Nodes: 64, Measured: at},
		{Stage: "propagate", Kind: "propagate[#,#)", Mean: 30 * time.Second, Nodes: 63, Measured: at},
	}, 16384, "calibrate", "propagate")
	path := progress.CostsFile(t.TempDir(), "qwen35")
	if err := progress.KeepCosts(path, "qwen35", "gguf 1 bytes", measured); err != nil {
		t.Fatal(err)
	}
	kept, err := progress.ReadCosts(path, "qwen35", "gguf 1 bytes")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tokens int64
		means  [3]time.Duration // calibrate, finalize, propagate
	}{
		{16384, [3]time.Duration{100 * time.Second, 50 * time.Second, 30 * time.Second}},
		{65536, [3]time.Duration{400 * time.Second, 50 * time.Second, 120 * time.Second}},
		{4096, [3]time.Duration{25 * time.Second, 50 * time.Second, 7500 * time.Millisecond}},
		{0, [3]time.Duration{100 * time.Second, 50 * time.Second, 30 * time.Second}},
		{1 << 62, [3]time.Duration{1 << 40 * time.Millisecond, 50 * time.Second, 1 << 40 * time.Millisecond}},
	} {
		got := progress.ScaleTokens(kept, tc.tokens)
		for i, k := range got {
			if k.Mean != tc.means[i] {
				t.Errorf("tokens %d: %s mean %v, want %v", tc.tokens, k.Stage, k.Mean, tc.means[i])
			}
		}
	}
	if kept[0].Tokens != 16384 || kept[1].Tokens != 0 || kept[2].Tokens != 16384 {
		t.Errorf("kept tokens %d, %d, %d; want 16384 for calibrate and propagate only", kept[0].Tokens, kept[1].Tokens, kept[2].Tokens)
	}
}
