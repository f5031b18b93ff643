package stages_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"orkpipe/stages"
)

// TestRTNTileMatchesFinalizeThenTile: the fused rtn-tile node writes exactly the tiled entry that
// finalize followed by tile writes, for every RTN variant a recipe can ask for (dtypes, groups,
// nibble orders, clip grids, rotation, a fixed activation clip, an imatrix-weighted MoE expert).
func TestRTNTileMatchesFinalizeThenTile(t *testing.T) {
	dense, err := runStage(t, "synth", `{"layers":1,"n_embd":64,"n_ff":96,"n_head":4,"n_head_kv":2,"vocab":360,"ctx":32,"type":"F16","seed":3}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	moe, err := runStage(t, "synth", moeSynth, nil)
	if err != nil {
		t.Fatal(err)
	}
	imatrix := filepath.Join(t.TempDir(), "imatrix.gguf")
	if err := os.WriteFile(imatrix, []byte(fpImatrix(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	const base = `"act_bits":%d,"damp":0,"act_order":false,"seed":%d,"n":%d,"k":%d`
	for _, tc := range []struct {
		name, fin, nibbles string
		moe                bool
	}{
		{"I4_NATIVE g32", `"tensor":"blk.0.attn_q.weight","method":"rtn","dtype":"I4_NATIVE","group":32,"rotation":"none","clip_grid":null,` + fmt.Sprintf(base, 4, 0, 64, 64), "low-first", false},
		{"I4_NATIVE per channel, high-first", `"tensor":"blk.0.attn_q.weight","method":"rtn","dtype":"I4_NATIVE","group":0,"rotation":"none","clip_grid":null,` + fmt.Sprintf(base, 4, 0, 64, 64), "high-first", false},
		{"I4 g64 no clip search", `"tensor":"blk.0.ffn_up.weight","method":"rtn","dtype":"I4","group":64,"rotation":"none","clip_grid":[1],` + fmt.Sprintf(base, 8, 0, 96, 64), "low-first", false},
		{"I8 g32", `"tensor":"blk.0.ffn_gate.weight","method":"rtn","dtype":"I8","group":32,"rotation":"none","clip_grid":[1,0.9],` + fmt.Sprintf(base, 8, 0, 96, 64), "low-first", false},
		{"I4_ROT_A8 hadamard", `"tensor":"blk.0.ffn_down.weight","method":"rtn","dtype":"I4_ROT_A8","group":32,"rotation":"hadamard","clip_grid":null,` + fmt.Sprintf(base, 8, 7, 64, 96), "low-first", false},
		{"fixed act_clip", `"tensor":"blk.0.attn_output.weight","method":"rtn","dtype":"I4_NATIVE","group":32,"rotation":"none","clip_grid":null,"act_clip":0.9,` + fmt.Sprintf(base, 4, 0, 64, 64), "low-first", false},
		{"MoE expert with imatrix", `"tensor":"blk.0.ffn_up_exps.weight","method":"rtn","dtype":"I4_NATIVE","group":32,"rotation":"none","clip_grid":null,"expert":3,"importance":"imatrix",` + fmt.Sprintf(base, 8, 0, 96, 64), "low-first", true},
	} {
		t.Run(tc.name, func(t *testing.T) { testRTNTileMatches(t, tc.fin, tc.nibbles, tc.moe, dense, moe, imatrix) })
		// Twice more with the buffer pool on: first a fresh buffer, then the one the first left.
		t.Run(tc.name+" pooled", func(t *testing.T) {
			stages.SetBufferPoolLimit(64 << 20)
			defer stages.SetBufferPoolLimit(0)
			for range 2 {
				testRTNTileMatches(t, tc.fin, tc.nibbles, tc.moe, dense, moe, imatrix)
			}
		})
	}
}

// testRTNTileMatches runs finalize then tile, and rtn-tile, on the weight finParams describes and compares
// the entries they write.
func testRTNTileMatches(t *testing.T, finParams, nibbles string, isMoE bool, dense, moe map[string]string, imatrix string) {
	in := map[string]string{"model": dense["model.gguf"]}
	if isMoE {
		in = map[string]string{"model": moe["model.gguf"], "imatrix": imatrix}
	}
	fin, err := runStage(t, "finalize", "{"+finParams+"}", in)
	if err != nil {
		t.Fatal(err)
	}
	var n, kp int
	q, err := stages.ReadQWeight(fin["weight"])
	if err != nil {
		t.Fatal(err)
	}
	n, kp = q.Meta.N, q.Meta.KP
	tiled, err := runStage(t, "tile", fmt.Sprintf(`{"nibbles":%q,"n":%d,"kp":%d}`, nibbles, n, kp), map[string]string{"weight": fin["weight"]})
	if err != nil {
		t.Fatal(err)
	}
	fused, err := runStage(t, "rtn-tile", fmt.Sprintf(`{"finalize":{%s},"nibbles":%q}`, finParams, nibbles), in)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(tiled["entry"])
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(fused["entry"])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("rtn-tile wrote %d bytes that differ from finalize + tile's %d", len(got), len(want))
	}
}

// TestRTNTileRefuses: rtn-tile binds RTN weights only, with a known nibble order.
func TestRTNTileRefuses(t *testing.T) {
	const fin = `"tensor":"blk.0.attn_q.weight","dtype":"I4_NATIVE","group":32,"rotation":"none","act_bits":4,"clip_grid":null,"damp":0,"act_order":false,"seed":0,"n":64,"k":64`
	k, err := stages.Lookup("rtn-tile")
	if err != nil {
		t.Fatal(err)
	}
	for _, params := range []string{
		`{"finalize":{"method":"gptq",` + fin + `},"nibbles":"low-first"}`,
		`{"finalize":{"method":"rtn",` + fin + `},"nibbles":"middle-first"}`,
		`{"finalize":{"method":"rtn",` + fin + `,"group":33},"nibbles":"low-first"}`,
	} {
		if _, err := k.Bind([]byte(params)); !errors.Is(err, stages.ErrBadParams) {
			t.Errorf("Bind(%s) = %v, want ErrBadParams", params, err)
		}
	}
}
