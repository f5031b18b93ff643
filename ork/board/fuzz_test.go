package board_test

import (
	"encoding/json"
	"testing"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
)

// FuzzParseProfile feeds board profile files (a recipe's `board:` path, `verify --board`) to Parse. What it
// accepts must survive a JSON round trip with the same digest, and plan a mixed set of entries (every
// dtype, K from 32 to a 27B ffn_down's 17408, a K that is no multiple of 32) without a panic: either a plan
// whose domains each hold at most the profile's capacity and number at most max_domains, or an error.
func FuzzParseProfile(f *testing.F) {
	good, err := json.Marshal(board.RK3588())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	for _, edit := range []func(*board.Profile){
		func(p *board.Profile) { p.PageSize, p.MaxDomains = 1<<30, 1<<16 },
		func(p *board.Profile) { p.DomainCeiling, p.Headroom = 1<<63-1, 0 },
		func(p *board.Profile) { p.MaxSegmentK, p.Companion.MaxK, p.Companion.KMultiple = 1<<31-32, 1<<31-1, 1 },
		func(p *board.Profile) { p.DomainCeiling, p.Headroom, p.MaxDomains = 4096, 4095, 1 },
		func(p *board.Profile) { p.Companion.Widths = []board.Width{board.Int4, board.FP16} },
	} {
		p := board.RK3588()
		edit(&p)
		b, err := json.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	var entries []pack.Entry
	for i, dt := range pack.DTypes {
		for _, kn := range [][2]int{{32, 8}, {5120, 17408}, {17408, 5120}, {4128, 64}, {100, 3}} {
			m := pack.Meta{Name: dt.String() + "." + string(rune('a'+i)), DType: dt, K: kn[0], N: kn[1], Source: pack.Digest{byte(i), 1}}
			if dt.RotationRequired() {
				m.Rotation = pack.Rotation{Kind: pack.RotHadamard, Block: 32, Seed: 1}
			}
			e, err := pack.Geometry(m, 0)
			if err != nil {
				continue // a shape this dtype cannot take
			}
			entries = append(entries, e)
		}
	}
	if len(entries) < len(pack.DTypes) {
		f.Fatalf("%d test entries for %d dtypes", len(entries), len(pack.DTypes))
	}
	if _, err := board.PlanDomains(entries, board.RK3588()); err != nil {
		f.Fatalf("the test entries on rk3588: %v", err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := board.Parse(data)
		if err != nil {
			return
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := board.Parse(again)
		if err != nil || q.Digest() != p.Digest() {
			t.Fatalf("accepted %s; its JSON %s reads back as %v (digest equal: %v)", data, again, err, err == nil && q.Digest() == p.Digest())
		}
		pl, err := board.PlanDomains(entries, p)
		if err != nil {
			return
		}
		if pl.Domains() > p.MaxDomains {
			t.Fatalf("plan uses %d domains, profile allows %d", pl.Domains(), p.MaxDomains)
		}
		var total int64
		for d, b := range pl.DomainBytes {
			if b <= 0 || b > pl.Capacity {
				t.Fatalf("domain %d holds %d bytes, capacity %d", d, b, pl.Capacity)
			}
			total += b
		}
		for i, r := range pl.Resident {
			if r <= 0 {
				t.Fatalf("entry %s: resident bytes %d", entries[i].Name, r)
			}
		}
		if total != pl.Total {
			t.Fatalf("domains hold %d bytes in all, plan total %d", total, pl.Total)
		}
	})
}
