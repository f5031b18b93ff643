package build_test

import (
	"slices"
	"strings"
	"testing"
)

// TestRTNTileFusion: an RTN weight whose finalized form only its tile reads is one rtn-tile node
// (one-shot calibration, or none); with sequential calibration propagate reads every weight of a
// window, so RTN weights keep their finalize and tile nodes there, and so does an RTN weight with an
// activation clip search; GPTQ weights always keep both; a promoted RTN twin (never propagated) is
// fused in either mode unless it has a clip search.
func TestRTNTileFusion(t *testing.T) {
	r := newRig(t)
	for _, tc := range []struct {
		mode  string
		sets  []string
		fused bool // the RTN weights (scheme 1)
		twin  bool // their promoted twins
	}{
		{"oneshot", nil, true, true},
		{"sequential", nil, false, true},
		{"oneshot", []string{"schemes.1.act_clip=search"}, false, false},
	} {
		t.Run(tc.mode+strings.Join(tc.sets, ","), func(t *testing.T) {
			sets := append([]string{"schemes.1.method=rtn", `promote.match=blk\.\d+\.attn_q\.weight`, "promote.to=I8_ROT", "promote.budget_mib=1"}, tc.sets...)
			st, err := planStatus(t, r, writeRecipe(t, tc.mode), sets...)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range []string{"0", "1"} {
				rtn, gptq := "blk."+l+".attn_q.weight", "blk."+l+".ffn_down.weight"
				_, fused := st["rtn-tile:"+rtn]
				_, fin := st["finalize:"+rtn]
				_, tile := st["tile:"+rtn]
				if fused != tc.fused || fin == tc.fused || tile == tc.fused {
					t.Errorf("%s: rtn-tile %v, finalize %v, tile %v; want fused %v", rtn, fused, fin, tile, tc.fused)
				}
				if !slices.Contains(st["write-orkpack"].Deps, map[bool]string{true: "rtn-tile:", false: "tile:"}[tc.fused]+rtn) {
					t.Errorf("write-orkpack reads %v, want %s's entry", st["write-orkpack"].Deps, rtn)
				}
				_, twin := st["rtn-tile-promote:"+rtn]
				_, twinFin := st["finalize-promote:"+rtn]
				if twin != tc.twin || twinFin == tc.twin {
					t.Errorf("%s: rtn-tile-promote %v, finalize-promote %v; want the twin fused %v", rtn, twin, twinFin, tc.twin)
				}
				if _, ok := st["finalize:"+gptq]; !ok {
					t.Errorf("%s: GPTQ weight without its finalize node", gptq)
				}
				if _, ok := st["tile:"+gptq]; !ok {
					t.Errorf("%s: GPTQ weight without its tile node", gptq)
				}
			}
			if p, ok := st["propagate[0,1)"]; ok {
				if !slices.Contains(p.Deps, "finalize:blk.0.attn_q.weight") {
					t.Errorf("propagate[0,1) reads %v, want the RTN weight's finalize node", p.Deps)
				}
			}
		})
	}
}
