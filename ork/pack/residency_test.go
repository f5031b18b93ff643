package pack_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
	"orkpipe/ork/tile"
)

// residentWeights are a small MoE pack's weights: a dense weight, then two experts of block 0 (up and down
// slices) and one of block 1 (its up slice only); every entry is int8 32x32, 4 KiB resident.
func residentWeights() []pack.Weight {
	r := rand.New(rand.NewPCG(5, 6))
	var ws []pack.Weight
	for _, name := range []string{"blk.0.attn_q.weight", "blk.0.ffn_up_exps.weight#0", "blk.0.ffn_up_exps.weight#1",
		"blk.0.ffn_down_exps.weight#0", "blk.0.ffn_down_exps.weight#1", "blk.1.ffn_up_exps.weight#0"} {
		ws = append(ws, quantized(r, name, pack.I8, 32, 32, 0, tile.LowFirst))
	}
	return ws
}

// residentPlan makes expert 0 of block 0 (8 KiB) hot under an 8 KiB budget and streams the others.
func residentPlan() pack.Residency {
	return pack.Residency{Domains: 1, Budget: 8192, Routing: pack.Digest{9, 9}, Hot: 1, Experts: []pack.ResidentExpert{
		{Layer: 0, Index: 0, Lookups: 7, Entries: []string{"blk.0.ffn_up_exps.weight#0", "blk.0.ffn_down_exps.weight#0"}},
		{Layer: 0, Index: 1, Lookups: 3, Entries: []string{"blk.0.ffn_up_exps.weight#1", "blk.0.ffn_down_exps.weight#1"}},
		{Layer: 1, Index: 0, Lookups: 0, Entries: []string{"blk.1.ffn_up_exps.weight#0"}}}}
}

// residentPack writes residentWeights with residentPlan and returns its path.
func residentPack(t testing.TB, dir string) string {
	return writePack(t, dir, residentWeights(), pack.WithResidency(residentPlan()))
}

// TestResidencyRoundTrip: the plan reads back as written, with its hit rate, and the board check of the
// dense and hot entries passes on one rk3588 domain.
func TestResidencyRoundTrip(t *testing.T) {
	ctx := context.Background()
	r, err := pack.Open(ctx, residentPack(t, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, ok := r.Residency()
	if !ok || !reflect.DeepEqual(got, residentPlan()) || r.Version() != pack.Version {
		t.Fatalf("residency %+v (%v), version %d; want %+v", got, ok, r.Version(), residentPlan())
	}
	if all, hot := got.Lookups(); all != 10 || hot != 7 || got.HitRate() != 0.7 {
		t.Fatalf("lookups %d, hot %d, hit rate %v", all, hot, got.HitRate())
	}
	if err := r.VerifyAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := board.CheckResidency(got, r.Entries(), board.RK3588()); err != nil {
		t.Fatal(err)
	}
	tiny := board.RK3588()
	tiny.DomainCeiling, tiny.Headroom = 8192, 0 // the dense entry and one hot expert need 12 KiB
	if err := board.CheckResidency(got, r.Entries(), tiny); !errors.Is(err, board.ErrDoesNotFit) {
		t.Fatalf("8 KiB domain: %v, want ErrDoesNotFit", err)
	}
	plain, err := pack.Open(ctx, writePack(t, t.TempDir(), residentWeights()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, ok := plain.Residency(); ok {
		t.Fatal("a pack written without a plan has one")
	}
}

// TestResidencyWriterRefuses: Commit checks the plan against the entries; a bad plan publishes nothing.
func TestResidencyWriterRefuses(t *testing.T) {
	edit := func(f func(r *pack.Residency)) pack.Residency {
		r := residentPlan()
		f(&r)
		return r
	}
	for name, tc := range map[string]struct {
		plan pack.Residency
		want string
	}{
		"over budget":  {edit(func(r *pack.Residency) { r.Budget = 8191 }), "take 8192 resident bytes, more than the budget 8191"},
		"missing":      {edit(func(r *pack.Residency) { r.Experts = r.Experts[:2] }), `expert entry "blk.1.ffn_up_exps.weight#0" is in no expert`},
		"dense listed": {edit(func(r *pack.Residency) { r.Experts[2].Entries = []string{"blk.0.attn_q.weight"} }), `entry "blk.0.attn_q.weight" listed under expert 0 of layer 1`},
		"wrong block":  {edit(func(r *pack.Residency) { r.Experts[2].Layer = 2 }), "listed under expert 0 of layer 2"},
		"twice":        {edit(func(r *pack.Residency) { r.Experts[1] = r.Experts[0] }), "listed twice"},
		"unknown":      {edit(func(r *pack.Residency) { r.Experts[2].Entries = []string{"blk.1.ffn_up_exps.weight#7"} }), `no entry "blk.1.ffn_up_exps.weight#7"`},
		"order":        {edit(func(r *pack.Residency) { e := r.Experts[0].Entries; e[0], e[1] = e[1], e[0] }), "not in index order"},
		"hot > all":    {edit(func(r *pack.Residency) { r.Hot = 4 }), "4 hot of 3 experts"},
		"no domains":   {edit(func(r *pack.Residency) { r.Domains = 0 }), "domains 0"},
		"lookups":      {edit(func(r *pack.Residency) { r.Experts[1].Lookups = -1 }), "lookups -1"},
		"lookups sum": {edit(func(r *pack.Residency) { r.Experts[0].Lookups, r.Experts[1].Lookups = math.MaxInt64, math.MaxInt64 }),
			"its 9223372036854775807 lookups take the experts' sum past"},
		"stream order": {edit(func(r *pack.Residency) { r.Experts[2].Lookups = 4 }), "the cold experts are not in plan order"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "p.orkpack")
			w, err := pack.Create(context.Background(), path, board.Planner(board.RK3588()), pack.WithResidency(tc.plan))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			for _, wt := range residentWeights() {
				if err := w.Add(context.Background(), wt); err != nil {
					t.Fatal(err)
				}
			}
			err = w.Commit(context.Background())
			if !errors.Is(err, pack.ErrPlan) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrPlan with %q", err, tc.want)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("a refused pack was published")
			}
		})
	}
}
