package board_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
)

func entry(t *testing.T, dt pack.DType, k, n int) pack.Entry {
	t.Helper()
	m := pack.Meta{Name: fmt.Sprintf("%s.%dx%d", dt, k, n), DType: dt, K: k, N: n, Source: pack.Digest{1}}
	if dt.RotationRequired() {
		m.Rotation = pack.Rotation{Kind: pack.RotHadamard, Block: 128, Seed: 1}
	}
	e, err := pack.Geometry(m, 0)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestResidentBytes: values computed by hand from docs/orkpack.md section 4 on the rk3588 profile.
func TestResidentBytes(t *testing.T) {
	tests := []struct {
		dt   pack.DType
		k, n int
		want int64
		why  string
	}{
		{pack.I4Native, 5120, 17408, 17408 * 5120 / 2, "int4, one segment, no companion for int4"},
		{pack.I4RotA8, 17408, 5120, 2*5120*8192 + 5120*1024, "int4 on disk, int8 resident in 3 segments; K > 10752: no companion"},
		{pack.I4RotA8, 6144, 5120, 2 * 6144 * 5120, "int8 resident + full-K companion (6144 % 512 == 0)"},
		{pack.I8, 4096, 100, 2 * 128 * 4096, "N padded to 128, + companion"},
		{pack.I4, 172, 100, 128 * 192, "compact int4 on disk inflates to int8 (Np 128, Kp 192); 172 % 512 != 0"},
		{pack.F16, 40, 20, 4096, "fp16 32x64x2 = 4096"},
		{pack.I8, 11264, 32, 32*8192 + 32*3072, "two segments, K > 10752: no companion"},
		{pack.I8, 10752, 32, 32*8192 + 32*2560 + 32*10752, "two segments + companion at the K limit"},
		{pack.I8Rot, 100, 40, 64 * 128, "Np 64, Kp 128, 100 % 512 != 0"},
	}
	p := board.RK3588()
	for _, tc := range tests {
		got, err := board.ResidentBytes(entry(t, tc.dt, tc.k, tc.n), p)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s K=%d N=%d: %d bytes, want %d (%s)", tc.dt, tc.k, tc.n, got, tc.want, tc.why)
		}
	}
	// The companion rule is a profile parameter, not a constant.
	q := board.RK3588()
	q.Companion.MaxK = 4096
	if got, _ := board.ResidentBytes(entry(t, pack.I4RotA8, 6144, 5120), q); got != 6144*5120 {
		t.Errorf("companion max_k 4096: %d bytes, want %d", got, 6144*5120)
	}
}

// qwen27B returns the 400 matmul weights of a Qwen3.6-27B-shaped hybrid (64 layers, 16 full attention + 48
// Gated-Delta-Net, n_embd 5120, n_ff 17408) in execution order, from metadata only. mixed promotes
// attn_output and ffn_down (80 weights) to I4_ROT_A8 as the board project's ra8 pack did.
func qwen27B(t *testing.T, mixed bool) []pack.Entry {
	const embd, ff = 5120, 17408
	var es []pack.Entry
	add := func(name string, k, n int, promote bool) {
		m := pack.Meta{Name: name, DType: pack.I4Native, K: k, N: n, Source: pack.Digest{byte(len(es)), 1}}
		if mixed && promote {
			m.DType = pack.I4RotA8
			m.Rotation = pack.Rotation{Kind: pack.RotHadamard, Block: 128, Seed: 7}
		}
		e, err := pack.Geometry(m, 0)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	for l := 0; l < 64; l++ {
		b := fmt.Sprintf("blk.%d.", l)
		if l%4 == 3 { // full attention: q (+gate), k, v, o
			add(b+"attn_q.weight", embd, 12288, false)
			add(b+"attn_k.weight", embd, 1024, false)
			add(b+"attn_v.weight", embd, 1024, false)
			add(b+"attn_output.weight", 6144, embd, true)
		} else { // Gated-Delta-Net: qkv, z gate, out
			add(b+"attn_qkv.weight", embd, 10240, false)
			add(b+"attn_gate.weight", embd, 6144, false)
			add(b+"ssm_out.weight", 6144, embd, false)
		}
		add(b+"ffn_gate.weight", embd, ff, false)
		add(b+"ffn_up.weight", embd, ff, false)
		add(b+"ffn_down.weight", ff, embd, true)
	}
	if len(es) != 400 {
		t.Fatalf("%d weights, want 400", len(es))
	}
	return es
}

func sums(es []pack.Entry) (disk int64) {
	for _, e := range es {
		disk += e.Length
	}
	return disk
}

const gib = 1 << 30

func Test27BPlan(t *testing.T) {
	p := board.RK3588()
	pure, mixed := qwen27B(t, false), qwen27B(t, true)
	pp, err := board.PlanDomains(pure, p)
	if err != nil {
		t.Fatal(err)
	}
	mp, err := board.PlanDomains(mixed, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pure int4: %d weights, %.2f GiB on disk, %.2f GiB resident, %d domains", len(pure), float64(sums(pure))/gib, float64(pp.Total)/gib, pp.Domains())
	t.Logf("mixed (80 x I4_ROT_A8): %.2f GiB on disk, %.2f GiB resident, %d domains", float64(sums(mixed))/gib, float64(mp.Total)/gib, mp.Domains())
	if d := float64(sums(pure)) / gib; d < 11 || d > 12 {
		t.Errorf("pure int4 on disk %.2f GiB, want the board project's ~11.6 GiB scale", d)
	}
	if sums(mixed) != sums(pure) {
		t.Errorf("mixed on disk %d, pure %d: I4_ROT_A8 is int4 on disk, sizes must match", sums(mixed), sums(pure))
	}
	if extra := float64(mp.Total-pp.Total) / gib; extra < 2.5 || extra > 3.5 {
		t.Errorf("mixed inflates resident by %.2f GiB, want ~3 GiB (80 weights int4 -> int8)", extra)
	}
	for i, e := range mixed {
		r, _ := board.ResidentBytes(e, p)
		if mp.Resident[i] != r {
			t.Fatalf("plan resident for %s = %d, ResidentBytes = %d", e.Name, mp.Resident[i], r)
		}
		if mp.DomainBytes[mp.Domain[i]] > mp.Capacity {
			t.Fatalf("domain %d over capacity", mp.Domain[i])
		}
	}

	small := board.RK3588()
	small.MaxDomains = mp.Domains() - 1
	_, err = board.PlanDomains(mixed, small)
	want := fmt.Sprintf("needs %d domains, rk3588 has %d; %.2f GiB resident", mp.Domains(), small.MaxDomains, float64(mp.Total)/gib)
	if !errors.Is(err, board.ErrDoesNotFit) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want ErrDoesNotFit with %q", err, want)
	}
	t.Log(err)

	// The board project's failure: domains sized at 1 GiB (the auto-sizer's premise) on a 16-domain board,
	// with every weight int8-resident (here: no companion buffers).
	gigDomains := board.RK3588()
	gigDomains.Name = "rk3588-1g"
	gigDomains.DomainCeiling, gigDomains.Headroom = gib, 0
	gigDomains.Companion.Widths = []board.Width{}
	gigDomains.Resident["I4_NATIVE"] = board.Int8
	_, err = board.PlanDomains(pure, gigDomains)
	if !errors.Is(err, board.ErrDoesNotFit) || !strings.Contains(err.Error(), "needs 24 domains, rk3588-1g has 16; 22.66 GiB resident") {
		t.Fatalf("1 GiB domains: %v", err)
	}
	t.Log(err)
}

// TestFitError: a plan that does not fit names the domains needed and available, what one domain holds,
// the entries too large for any domain and the largest entries, with exact numbers.
func TestFitError(t *testing.T) {
	tiny := board.RK3588()
	tiny.Name, tiny.MaxDomains = "tiny", 2
	tiny.DomainCeiling, tiny.Headroom = 100*(1<<20), 1<<20 // 99 MiB per domain
	es := []pack.Entry{
		entry(t, pack.I8, 5120, 4096),  // 20 MiB + 20 MiB companion (5120 % 512 == 0)
		entry(t, pack.I8, 5120, 17408), // 85 MiB + 85 MiB companion: more than a domain
		entry(t, pack.I4Native, 5120, 4096),
	}
	_, err := board.PlanDomains(es, tiny)
	var fe *board.FitError
	if !errors.As(err, &fe) || !errors.Is(err, board.ErrDoesNotFit) {
		t.Fatalf("err = %v, want a *FitError wrapping ErrDoesNotFit", err)
	}
	want := board.FitError{Board: "tiny", Needed: 3, Available: 2, Capacity: 99 << 20, Total: (40 + 170 + 10) << 20,
		Oversized: []board.Sized{{es[1].Name, 170 << 20}},
		Largest:   []board.Sized{{es[1].Name, 170 << 20}, {es[0].Name, 40 << 20}, {es[2].Name, 10 << 20}}}
	if fmt.Sprint(*fe) != fmt.Sprint(want) {
		t.Fatalf("FitError\n %+v\nwant\n %+v", *fe, want)
	}
	msg := `plan does not fit the board: entry "I8.5120x17408" needs 170.00 MiB resident, more than one tiny domain holds (99.00 MiB); ` +
		`needs 3 domains, tiny has 2; 220.00 MiB resident, 99.00 MiB per domain; largest entries: I8.5120x17408 170.00 MiB, I8.5120x4096 40.00 MiB, I4_NATIVE.5120x4096 10.00 MiB`
	if err.Error() != msg {
		t.Fatalf("message\n %s\nwant\n %s", err, msg)
	}

	// Every entry fits a domain, but not in the domains the board has.
	many := make([]pack.Entry, 7)
	for i := range many {
		many[i] = entry(t, pack.I8, 5120, 4096)
		many[i].Name = fmt.Sprint("w", i)
	}
	_, err = board.PlanDomains(many, tiny)
	if !errors.As(err, &fe) || fe.Needed != 4 || len(fe.Oversized) != 0 || len(fe.Largest) != 5 || fe.Largest[0].Name != "w0" {
		t.Fatalf("err = %v (%+v), want 4 domains needed, none oversized, the first 5 largest (ties in index order)", err, fe)
	}
	if !strings.Contains(err.Error(), "needs 4 domains, tiny has 2; 280.00 MiB resident") {
		t.Fatal(err)
	}
}

// TestPlannerAndIndexShareResidentBytes: what the writer stores in the index is exactly ResidentBytes and
// PlanDomains on the profile; changing the profile's companion rule changes both the same way.
func TestPlannerAndIndexShareResidentBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	base := board.RK3588()
	noComp := board.RK3588()
	noComp.Name = "rk3588-nocompanion"
	noComp.Companion.Widths = []board.Width{}
	for _, p := range []board.Profile{base, noComp} {
		path := filepath.Join(t.TempDir(), "p.orkpack")
		w, err := pack.Create(context.Background(), path, board.Planner(p))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for i, dt := range pack.DTypes {
			m := pack.Meta{Name: fmt.Sprint("w", i), DType: dt, K: 512 * (1 + i%2), N: 48, Source: pack.Digest{byte(i + 1)}}
			if dt.RotationRequired() {
				m.Rotation = pack.Rotation{Kind: pack.RotHadamard, Block: 64, Seed: 3}
			}
			wt := pack.Weight{Meta: m}
			if dt == pack.F16 {
				wt.F16 = make([]uint16, m.K*m.N)
			} else {
				wt.Codes = make([]int8, m.K*m.N)
				for j := range wt.Codes {
					wt.Codes[j] = int8(r.IntN(16) - 8)
				}
				wt.Scales = make([]float32, m.N)
			}
			if err := w.Add(ctx, wt); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		pr, err := pack.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		es := pr.Entries()
		pl, err := board.PlanDomains(es, p)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range es {
			rb, err := board.ResidentBytes(e, p)
			if err != nil {
				t.Fatal(err)
			}
			if e.ResidentBytes != rb || pl.Resident[i] != rb || e.Domain != pl.Domain[i] {
				t.Fatalf("%s on %s: index %d (domain %d), ResidentBytes %d, plan %d (domain %d)", e.Name, p.Name, e.ResidentBytes, e.Domain, rb, pl.Resident[i], pl.Domain[i])
			}
		}
		if err := board.CheckPlan(pr.Board(), es, p); err != nil {
			t.Fatal(err)
		}
		other := noComp
		if p.Name == noComp.Name {
			other = base
		}
		if err := board.CheckPlan(pr.Board(), es, other); !errors.Is(err, board.ErrPlanDiffers) {
			t.Fatalf("CheckPlan against another profile: %v", err)
		}
		pr.Close()
	}
}

func TestParseProfile(t *testing.T) {
	good, err := json.Marshal(board.RK3588())
	if err != nil {
		t.Fatal(err)
	}
	p, err := board.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	if p.Digest() != board.RK3588().Digest() {
		t.Fatal("profile digest changed through JSON")
	}
	path := filepath.Join(t.TempDir(), "b.json")
	if err := os.WriteFile(path, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := board.Load(path); err != nil {
		t.Fatal(err)
	}
	if _, err := board.Load("rk3588"); err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		json.Unmarshal(good, &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	bad := map[string]struct {
		data  []byte
		field string
	}{
		"unknown field":   {edit(func(m map[string]any) { m["max_domain"] = 16 }), "unknown field"},
		"missing domains": {edit(func(m map[string]any) { delete(m, "max_domains") }), "max_domains"},
		"headroom":        {edit(func(m map[string]any) { m["headroom_bytes"] = 1 << 40 }), "headroom_bytes"},
		"page":            {edit(func(m map[string]any) { m["page_size"] = 1000 }), "page_size"},
		"missing dtype":   {edit(func(m map[string]any) { delete(m["resident"].(map[string]any), "I4_ROT_A8") }), "I4_ROT_A8"},
		"bad width":       {edit(func(m map[string]any) { m["resident"].(map[string]any)["I4"] = "int3" }), "int3"},
		"trailing":        {append(append([]byte(nil), good...), []byte(" {}")...), "after"},
		"missing widths":  {edit(func(m map[string]any) { delete(m["companion"].(map[string]any), "widths") }), "companion.widths"},
	}
	for name, tc := range bad {
		_, err := board.Parse(tc.data)
		if !errors.Is(err, board.ErrProfile) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: err = %v, want ErrProfile naming %q", name, err, tc.field)
		}
	}
}
