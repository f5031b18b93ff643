package verify_test

import (
	"strings"
	"testing"

	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
	"orkpipe/pipelines/verify"
)

func TestEntryFitsTensor(t *testing.T) {
	rot := pack.Rotation{Kind: pack.RotHadamard, Block: 64, Seed: 1}
	entry := func(name string, k, n int, r pack.Rotation) pack.Entry {
		return pack.Entry{Meta: pack.Meta{Name: name, K: k, N: n, Rotation: r}}
	}
	for _, c := range []struct {
		name  string
		e     pack.Entry
		shape []int64
		want  string // "" fits
	}{
		{"same", entry("w", 64, 32, pack.Rotation{}), []int64{64, 32}, ""},
		{"rotated, K padded", entry("w", 128, 32, rot), []int64{100, 32}, ""},
		{"expert", entry("e#3", 64, 32, pack.Rotation{}), []int64{64, 32, 4}, ""},
		{"N", entry("w", 64, 32, pack.Rotation{}), []int64{64, 64}, `pack entry "w" is 64 x 32 (K x N), tensor "w" is [64 64]: want the entry's N`},
		{"K", entry("w", 64, 32, pack.Rotation{}), []int64{32, 32}, "want the entry's K"},
		{"rotated K above", entry("w", 128, 32, rot), []int64{192, 32}, "K padded for its rotation), tensor \"w\" is [192 32]: want K at most"},
		{"expert beyond", entry("e#4", 64, 32, pack.Rotation{}), []int64{64, 32, 4}, "want more than 4 experts"},
		{"expert of a matrix", entry("e#999999999999", 64, 32, pack.Rotation{}), []int64{64, 32}, "want an expert tensor [K N n_expert] with more than 999999999999 experts"},
		{"matrix of 3 dims", entry("w", 64, 32, pack.Rotation{}), []int64{64, 32, 2}, "want a matrix [K N]"},
	} {
		name, _, _ := pack.SplitExpert(c.e.Name)
		err := verify.EntryFitsTensor(c.e, gguf.TensorInfo{Name: name, Shape: c.shape})
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
