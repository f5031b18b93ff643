package main

import (
	"encoding/json"
	"strings"
	"testing"
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
