package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/board"
	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
	"orkpipe/ork/quant"
)

func TestRank(t *testing.T) {
	path := buildStoriesPack(t, t.TempDir(), "s.orkpack", "", "")
	out, code := runPackCLI(t, "rank", "--json", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var got struct {
		Board   string      `json:"board"`
		Entries []rankEntry `json:"entries"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Board != "rk3588" || len(got.Entries) != 36 {
		t.Fatalf("board %q, %d entries", got.Board, len(got.Entries))
	}
	for i := 1; i < len(got.Entries); i++ {
		if got.Entries[i].QErr > got.Entries[i-1].QErr {
			t.Fatalf("not worst first at %d: %v > %v", i, got.Entries[i].QErr, got.Entries[i-1].QErr)
		}
	}
	// Hand-computed from docs/orkpack.md (page 4096; scales f32 [N][groups] page-padded):
	//   output.weight K=64 N=512 I4_NATIVE G32: codes 512*64/2=16384 + scales 4096; as I8_ROT codes 32768
	//     -> disk +16384; resident int4 16384 -> int8 32768: +16384 (K%512 != 0: no companion).
	//   ffn_gate K=64 N=172 G32: int4 Np 192 -> 6144 -> 8192; int8 Np 192 -> 12288: +4096 disk and resident.
	//   ffn_down K=172 N=64 I8: codes 64*192=12288, as int4 6144 -> 8192: I4_ROT_A8 disk -4096, resident 0.
	want := map[string][4]int64{ // I8_ROT disk, resident; I4_ROT_A8 disk, resident
		"output.weight":         {16384, 16384, 0, 16384},
		"blk.0.ffn_gate.weight": {4096, 4096, 0, 4096},
		"blk.0.ffn_down.weight": {0, 0, -4096, 0},
	}
	for _, e := range got.Entries {
		w, ok := want[e.Name]
		if !ok {
			continue
		}
		i8, a8 := e.Promote["I8_ROT"], e.Promote["I4_ROT_A8"]
		if g := [4]int64{i8.DiskBytes, i8.ResidentBytes, a8.DiskBytes, a8.ResidentBytes}; g != w {
			t.Errorf("%s (%s): costs %v, want %v", e.Name, e.DType, g, w)
		}
		delete(want, e.Name)
	}
	if len(want) != 0 {
		t.Errorf("entries missing from rank: %v", want)
	}
	text, code := runPackCLI(t, "rank", path)
	if code != 0 || !strings.Contains(text, "I8_ROT DISK") {
		t.Fatalf("exit %d: %s", code, text)
	}
	t.Log(strings.Join(strings.SplitN(text, "\n", 8)[:7], "\n"))
}

// TestRankPromotionPadsK: an unrotated entry whose K (500) is not a multiple of 32 is priced as the
// rotated entry the quantizer and pack writer produce for it (K padded to 512, whose I8 resident width
// the rk3588 profile gives a full-K companion), not at its unpadded K.
func TestRankPromotionPadsK(t *testing.T) {
	ctx := context.Background()
	// Real weights: stories260K's token embedding (512 x 64 float32) read as 64 rows of 500.
	src, err := gguf.Open(ctx, testfiles.Path(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ti, err := src.Tensor("token_embd.weight")
	if err != nil {
		t.Fatal(err)
	}
	data := make([]float32, ti.Rows()*ti.RowLen())
	if err := src.ReadRows(ctx, ti, 0, data); err != nil {
		t.Fatal(err)
	}
	const n, k = 64, 500
	m := quant.Matrix{Name: "w", Rows: n, Cols: k, Data: data[:n*k]}
	write := func(path string, tiers map[string]pack.DType) map[string]pack.Entry {
		w, err := pack.Create(ctx, path, board.Planner(board.RK3588()))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for name, dt := range tiers {
			opts := []quant.Option{quant.WithBits(dt.Bits())}
			if dt.RotationRequired() {
				opts = append(opts, quant.WithRotation(true, 7))
			}
			q, err := quant.RTN(ctx, m, nil, opts...)
			if err != nil {
				t.Fatal(err)
			}
			meta := pack.Meta{Name: name, DType: dt, K: q.KP, N: q.N, Group: q.Group, QErr: q.QErr, Source: pack.Digest{1}}
			if !q.Rotation.IsZero() {
				meta.Rotation = pack.Rotation{Kind: pack.RotHadamard, Block: q.Rotation.Block, Seed: q.Rotation.Seed}
			}
			if err := w.Add(ctx, pack.Weight{Meta: meta, Codes: q.Codes, Scales: q.Scales}); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		r, err := pack.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		got := map[string]pack.Entry{}
		for _, e := range r.Entries() {
			got[e.Name] = e
		}
		return got
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "i8.orkpack")
	from := write(path, map[string]pack.DType{"w": pack.I8})["w"]
	to := write(filepath.Join(dir, "rot.orkpack"), map[string]pack.DType{"I8_ROT": pack.I8Rot, "I4_ROT_A8": pack.I4RotA8})
	if from.K != k || to["I8_ROT"].K != 512 {
		t.Fatalf("written K %d and %d, want %d and 512", from.K, to["I8_ROT"].K, k)
	}
	out, code := runPackCLI(t, "rank", "--json", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var got struct {
		Entries []rankEntry `json:"entries"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Entries) != 1 {
		t.Fatalf("%d entries: %s", len(got.Entries), out)
	}
	for dt, e := range to {
		c := got.Entries[0].Promote[dt]
		want := [2]int64{e.Length - from.Length, e.ResidentBytes - from.ResidentBytes}
		if g := [2]int64{c.DiskBytes, c.ResidentBytes}; g != want {
			t.Errorf("promotion to %s: disk, resident %v, want %v (the written entries' differences)", dt, g, want)
		}
	}
}
