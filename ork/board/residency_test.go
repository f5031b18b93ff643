package board_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
)

// bruteForce returns the best (lookups, count) over every subset of experts within budget.
func bruteForce(ex []board.Expert, budget int64) (lookups int64, count int) {
	for mask := 0; mask < 1<<len(ex); mask++ {
		var b, l int64
		n := 0
		for i, x := range ex {
			if mask&(1<<i) != 0 {
				b += x.Bytes
				l += x.Lookups
				n++
			}
		}
		if b <= budget && (l > lookups || l == lookups && n > count) {
			lookups, count = l, n
		}
	}
	return lookups, count
}

func value(ex []board.Expert, hot []bool) (bytes, lookups int64, count int) {
	for i, h := range hot {
		if h {
			bytes += ex[i].Bytes
			lookups += ex[i].Lookups
			count++
		}
	}
	return bytes, lookups, count
}

// TestChooseExact: on random instances of one to four size classes Choose's set is within budget and as
// good as the best of every subset (lookups, then experts); greedy by lookups per byte is not exact
// across classes, and on one class Choose is the greedy choice.
func TestChooseExact(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 400; trial++ {
		n := 1 + r.IntN(12)
		sizes := []int64{4096 * int64(1+r.IntN(6)), 4096 * int64(1+r.IntN(6)), 4096 * int64(1+r.IntN(6)), 4096 * int64(1+r.IntN(6))}[:1+r.IntN(4)]
		ex := make([]board.Expert, n)
		var total int64
		for i := range ex {
			ex[i] = board.Expert{Layer: i / 4, Index: i % 4, Bytes: sizes[r.IntN(len(sizes))], Lookups: int64(r.IntN(5) * r.IntN(40))}
			total += ex[i].Bytes
		}
		budget := r.Int64N(total + 4096)
		hot, err := board.Choose(ex, budget)
		if err != nil {
			t.Fatal(err)
		}
		b, l, c := value(ex, hot)
		wl, wc := bruteForce(ex, budget)
		if b > budget || l != wl || c != wc {
			t.Fatalf("trial %d: %+v under %d: chose %d bytes, %d lookups, %d experts; best is %d lookups with %d experts", trial, ex, budget, b, l, c, wl, wc)
		}
	}
	// sizes 3, 2, 2 (pages) with lookups 30, 19, 19 under 4 pages: greedy by lookups per byte takes the 3
	// (30), the optimum both 2s (38)
	ex := []board.Expert{{Bytes: 3 * 4096, Lookups: 30}, {Index: 1, Bytes: 2 * 4096, Lookups: 19}, {Index: 2, Bytes: 2 * 4096, Lookups: 19}}
	hot, _ := board.Choose(ex, 4*4096)
	if _, l, _ := value(ex, hot); l != 38 {
		t.Fatalf("two classes: %d lookups, want 38 (greedy by lookups per byte would take 30)", l)
	}
	// one class: the floor(budget/size) most-routed
	one := []board.Expert{{Bytes: 10, Lookups: 5}, {Index: 1, Bytes: 10, Lookups: 9}, {Index: 2, Bytes: 10, Lookups: 0}, {Index: 3, Bytes: 10, Lookups: 7}}
	hot, _ = board.Choose(one, 25)
	if fmt.Sprint(hot) != "[false true false true]" {
		t.Fatalf("one class, budget 2.5 experts: %v, want the two most routed", hot)
	}
	hot, _ = board.Choose(one, 40)
	if fmt.Sprint(hot) != "[true true true true]" {
		t.Fatalf("budget covering all: %v, want all (the unrouted one too)", hot)
	}
	if _, err := board.Choose([]board.Expert{{Bytes: 0}}, 10); err == nil {
		t.Fatal("an expert of 0 bytes accepted")
	}
}

// moePack returns the entries of an MoE-shaped pack: per layer one dense I8 weight (K 512, N 256) and
// experts of I8 gate/up (K 512, N 128) and down (K 128, N 512) slices.
func moePack(t *testing.T, layers, experts int) []pack.Entry {
	t.Helper()
	var es []pack.Entry
	add := func(name string, k, n int) {
		e, err := pack.Geometry(pack.Meta{Name: name, DType: pack.I8, K: k, N: n, Source: pack.Digest{1}}, 0)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	for l := 0; l < layers; l++ {
		add(fmt.Sprintf("blk.%d.attn_q.weight", l), 512, 256)
		for _, tn := range []string{"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"} {
			for e := 0; e < experts; e++ {
				if tn == "ffn_down_exps" {
					add(fmt.Sprintf("blk.%d.%s.weight#%d", l, tn, e), 128, 512)
				} else {
					add(fmt.Sprintf("blk.%d.%s.weight#%d", l, tn, e), 512, 128)
				}
			}
		}
	}
	return es
}

// TestPlanResidency: experts are grouped per block and index with their entries' resident bytes; the
// plan takes the most-routed experts under the budget, orders hot then cold by lookups, and its hit rate
// is the hot experts' share of the lookups.
func TestPlanResidency(t *testing.T) {
	p := board.RK3588()
	es := moePack(t, 2, 4)
	ex, dense, err := board.Experts(es, p)
	if err != nil {
		t.Fatal(err)
	}
	// gate/up: 128 x 512 int8 = 64 KiB + a 64 KiB companion (512 % 512 == 0); down: 512 x 128, no companion
	const expert = 2*128<<10 + 64<<10
	if len(ex) != 8 || len(dense) != 2 || ex[5].Layer != 1 || ex[5].Index != 1 || ex[5].Bytes != expert ||
		fmt.Sprint(ex[5].Entries) != fmt.Sprint([]int{15, 19, 23}) {
		t.Fatalf("experts %+v, dense %v", ex, dense)
	}
	counts := map[[2]int]int64{{0, 0}: 40, {0, 1}: 30, {0, 2}: 20, {0, 3}: 10, {1, 0}: 5, {1, 1}: 35, {1, 2}: 25, {1, 3}: 35}
	lookups := func(l, e int) int64 { return counts[[2]int{l, e}] }
	r, err := board.PlanResidency(es, lookups, board.Budget{Bytes: 3*expert + expert/2}, 1, p)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for i, x := range r.Experts {
		order = append(order, fmt.Sprintf("%d.%d", x.Layer, x.Index))
		if i == r.Hot-1 {
			order = append(order, "|")
		}
	}
	if got := strings.Join(order, " "); got != "0.0 1.1 1.3 | 0.1 1.2 0.2 0.3 1.0" || r.HotLookups != 110 || r.Lookups != 200 || r.HitRate() != 0.55 || r.HotBytes != 3*expert {
		t.Fatalf("plan %s: hot %d lookups of %d (%.3f), %d bytes", got, r.HotLookups, r.Lookups, r.HitRate(), r.HotBytes)
	}
	full, err := board.PlanResidency(es, lookups, board.Budget{Percent: 100}, 1, p)
	if err != nil || full.Hot != 8 || full.HitRate() != 1 {
		t.Fatalf("100%%: %d hot, %v", full.Hot, err)
	}
	curve, err := board.HitCurve(r.Experts, []int64{0, expert, 4 * expert, 8 * expert})
	if err != nil || fmt.Sprint(curve) != fmt.Sprintf("[{0 0 0 0} {%d 1 %d 40} {%d 4 %d 140} {%d 8 %d 200}]", expert, expert, 4*expert, 4*expert, 8*expert, 8*expert) {
		t.Fatalf("curve %v, %v", curve, err)
	}
}

// TestResidencyRefusal: asking every expert resident where they do not fit, or a budget that does not
// fit beside the dense entries, is a *ResidencyError wrapping ErrDoesNotFit with the numbers; so is a
// window the dense entries alone overflow.
func TestResidencyRefusal(t *testing.T) {
	p := board.RK3588()
	p.Name, p.DomainCeiling, p.Headroom = "small", 2<<20, 0 // 2 MiB domains
	es := moePack(t, 2, 4)                                  // dense 2 x 256 KiB, 8 experts of 320 KiB = 2.5 MiB
	var re *board.ResidencyError
	_, err := board.PlanResidency(es, func(int, int) int64 { return 1 }, board.Budget{Percent: 100}, 1, p)
	if !errors.As(err, &re) || !errors.Is(err, board.ErrDoesNotFit) {
		t.Fatalf("err = %v, want a *ResidencyError", err)
	}
	want := "plan does not fit the board: residency: every expert resident (8 experts, 24 entries, 2.50 MiB) beside the dense entries (512.00 KiB) needs 3.00 MiB, " +
		"more than the 1-domain window of small (2.00 MiB = 1 × 2.00 MiB per domain) holds; at most 4 of the 8 experts fit beside the dense entries (budget auto plans the most-routed that fit)"
	if err.Error() != want {
		t.Fatalf("message\n %s\nwant\n %s", err, want)
	}
	if _, err := board.PlanResidency(es, func(int, int) int64 { return 1 }, board.Budget{Percent: 100}, 2, p); err != nil {
		t.Fatalf("two domains hold everything: %v", err)
	}
	_, err = board.PlanResidency(es, func(int, int) int64 { return 1 }, board.Budget{Percent: 70}, 1, p)
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "budget 70% (1.75 MiB of the experts' 2.50 MiB) beside the dense entries (512.00 KiB) needs 2.25 MiB") {
		t.Fatalf("70%%: %v", err)
	}
	r, err := board.PlanResidency(es, func(l, e int) int64 { return int64(10*l + e) }, board.Budget{Auto: true}, 1, p)
	if err != nil || r.Hot != 4 || r.Budget != 2<<20-512<<10 || r.Experts[0].Layer != 1 || r.Experts[0].Index != 3 {
		t.Fatalf("auto: %d hot (budget %d), first %+v, %v", r.Hot, r.Budget, r.Experts[0], err)
	}
	p.DomainCeiling = 256 << 10
	_, err = board.PlanResidency(es, func(int, int) int64 { return 1 }, board.Budget{Auto: true}, 1, p)
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "the dense entries alone (512.00 KiB resident) do not fit") {
		t.Fatalf("dense overflow: %v", err)
	}
	if _, err := board.PlanResidency(es, func(int, int) int64 { return 1 }, board.Budget{Auto: true}, 17, board.RK3588()); !errors.Is(err, board.ErrProfile) {
		t.Fatalf("17 domains of rk3588: %v", err)
	}
}

// TestResidencyFragmentation: on more than one domain first-fit placement can strand room at a domain's
// end; the plan then drops experts until the dense and hot entries, placed in index order as the loader
// places them, fit.
func TestResidencyFragmentation(t *testing.T) {
	p := board.RK3588()
	p.Name, p.DomainCeiling, p.Headroom = "frag", 1000<<10, 0 // 1000 KiB domains
	entry := func(name string, n int) pack.Entry {            // int8, K 640 (no companion): 640·n bytes
		e, err := pack.Geometry(pack.Meta{Name: name, DType: pack.I8, K: 640, N: n, Source: pack.Digest{1}}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	es := []pack.Entry{entry("blk.0.ffn_up_exps.weight#0", 800), entry("blk.1.attn_q.weight", 960), entry("blk.1.ffn_up_exps.weight#0", 800)}
	// window 2000 KiB, dense 600 KiB: the budget (1400 KiB, capped at the experts' 1000) holds both 500 KiB
	// experts, but in index order
	// expert, dense, expert need three domains (500 | 600 | 500)
	r, err := board.PlanResidency(es, func(l, e int) int64 { return int64(10 + l) }, board.Budget{Auto: true}, 2, p)
	if err != nil {
		t.Fatal(err)
	}
	if r.Budget != 1000<<10 || r.Hot != 1 || r.Experts[0].Layer != 1 || r.HitRate() != 11.0/21 {
		t.Fatalf("hot %d (budget %d, first %+v, hit rate %v), want the one most-routed expert after placement", r.Hot, r.Budget, r.Experts[0], r.HitRate())
	}
}

// TestResidencyBudgetText: canonical budget text round-trips; bad text is refused.
func TestResidencyBudgetText(t *testing.T) {
	for _, s := range []string{"auto", "25%", "12.5%", "100%", "0", "4294967296"} {
		b, err := board.ParseBudget(s)
		if err != nil || b.String() != s {
			t.Errorf("%q: %+v %v", s, b, err)
		}
	}
	for _, s := range []string{"", "0%", "101%", "-1", "4GiB", "x%"} {
		if _, err := board.ParseBudget(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

// lfm2_8B_A1B returns the int8 pack entries of an LFM2-8B-A1B-shaped model, from metadata only. Shapes:
// llama.cpp's lfm2moe loader (src/models/lfm2moe.cpp: 24 blocks is its 8B.A1B type; the first
// leading_dense_block_count blocks dense, the rest MoE with ffn_{gate,up}_exps [n_embd, n_ff_exp, n_expert]
// and ffn_down_exps [n_ff_exp, n_embd, n_expert]; attention blocks wq/wo [n_embd, n_embd] and wk/wv
// [n_embd, n_embd_k_gqa]; conv blocks in_proj [n_embd, 3·n_embd] and out_proj [n_embd, n_embd]) with
// LFM2-8B-A1B's hyperparameters (Hugging Face Lfm2MoeConfig defaults, "similar to LFM2-8B-A1B"): n_embd
// 2048, n_ff 7168, n_ff_exp 1792, 32 experts (top-4), 2 dense blocks, 32 heads / 8 KV heads of 64, 6 of 24
// blocks attention (assumed at 2, 6, 10, 14, 18, 21: placement order only). 22 MoE blocks × 3 tensors ×
// 32 experts = 2112 expert entries, the count the board log gives. The conv kernels ([3, n_embd]), norms,
// routers, expert biases and the tied embedding stay out of the pack.
func lfm2_8B_A1B(t *testing.T) []pack.Entry {
	const embd, ff, ffExp, experts, kv = 2048, 7168, 1792, 32, 512
	attn := map[int]bool{2: true, 6: true, 10: true, 14: true, 18: true, 21: true}
	var es []pack.Entry
	add := func(name string, k, n int) {
		e, err := pack.Geometry(pack.Meta{Name: name, DType: pack.I8, K: k, N: n, Source: pack.Digest{1}}, 0)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	for l := 0; l < 24; l++ {
		b := fmt.Sprintf("blk.%d.", l)
		if attn[l] {
			add(b+"attn_q.weight", embd, embd)
			add(b+"attn_k.weight", embd, kv)
			add(b+"attn_v.weight", embd, kv)
			add(b+"attn_output.weight", embd, embd)
		} else {
			add(b+"shortconv.in_proj.weight", embd, 3*embd)
			add(b+"shortconv.out_proj.weight", embd, embd)
		}
		if l < 2 {
			add(b+"ffn_gate.weight", embd, ff)
			add(b+"ffn_up.weight", embd, ff)
			add(b+"ffn_down.weight", ff, embd)
			continue
		}
		for e := 0; e < experts; e++ {
			add(fmt.Sprintf("%sffn_gate_exps.weight#%d", b, e), embd, ffExp)
		}
		for e := 0; e < experts; e++ {
			add(fmt.Sprintf("%sffn_up_exps.weight#%d", b, e), embd, ffExp)
		}
		for e := 0; e < experts; e++ {
			add(fmt.Sprintf("%sffn_down_exps.weight#%d", b, e), ffExp, embd)
		}
	}
	return es
}

// TestLFM2_8B_A1BOnPaper: how many LFM2-8B-A1B int8 experts fit the board's 4 GiB window beside the dense
// weights, and where the ~1909 resident experts the board log hit before compute failed stand. One expert
// (gate + up + down of one block) is 3.5 + 3.5 MiB (gate, with its full-K companion: K 2048 % 512 == 0),
// the same for up, and 3.5 MiB for down (K 1792: no companion) = 17.5 MiB; the dense weights take 864 MiB.
func TestLFM2_8B_A1BOnPaper(t *testing.T) {
	es := lfm2_8B_A1B(t)
	p := board.RK3588()
	ex, dense, err := board.Experts(es, p)
	if err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	if len(ex) != 704 || len(es)-len(dense) != 2112 || ex[0].Bytes != 17.5*mib {
		t.Fatalf("%d experts (%d entries), %d bytes each; want 704 (2112) of 17.5 MiB", len(ex), len(es)-len(dense), ex[0].Bytes)
	}
	uniform := func(int, int) int64 { return 1 }
	raw := board.RK3588() // the bare 4 GiB IOVA window: no fill ceiling below it, no headroom
	raw.Name, raw.DomainCeiling, raw.Headroom = "rk3588-4gib", 4096*mib, 0
	for _, c := range []struct {
		p       board.Profile
		domains int
		fit     int
	}{{p, 1, 171}, {raw, 1, 184}, {p, 3, 613}, {raw, 3, 652}} {
		r, err := board.PlanResidency(es, uniform, board.Budget{Auto: true}, c.domains, c.p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s, %d domain(s) (%d MiB): dense %d MiB, budget %d MiB: %d of 704 experts hot (%d entries, %d MiB)",
			c.p.Name, c.domains, r.Window.Bytes/mib, r.Dense/mib, r.Budget/mib, r.Hot, 3*r.Hot, r.HotBytes/mib)
		if r.Dense != 864*mib || r.Hot != c.fit {
			t.Errorf("%s x%d: dense %d MiB, %d experts hot; want 864 MiB and %d", c.p.Name, c.domains, r.Dense/mib, r.Hot, c.fit)
		}
	}
	_, err = board.PlanResidency(es, uniform, board.Budget{Percent: 100}, 1, p)
	var re *board.ResidencyError
	if !errors.As(err, &re) || re.Fit != 171 || re.AskedBytes != 704*17.5*mib {
		t.Fatalf("every expert resident in one window: %v", err)
	}
	t.Log(err)
}
