package registry

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/board"
	"orkpipe/ork/pack"
	"orkpipe/registry/regtest"
)

// TestLargeFileRanges pushes a generated 512 MiB orkpack (8 int8 entries of 8192 x 8192 with random
// codes, written by ork/pack) as one raw layer of 64 MiB ranges (9 ranges, 4 jobs) and pulls it back
// byte-identical in a child process whose peak RSS must not grow with the file or hold a range
// (under 64 MiB; 18 MiB measured). Under the race detector the pack is one entry in 8 MiB ranges
// (9 ranges, the same 4 jobs: the concurrency the detector checks, in seconds instead of minutes) and
// the peak RSS is not held to the bound. Skipped with -short.
func TestLargeFileRanges(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "512 MiB round trip skipped with -short")
	}
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	entries, rangeSize, ranges := 8, int64(64<<20), 9
	if raceEnabled {
		entries, rangeSize, ranges = 1, 8<<20, 9
	}
	size := writeLargePack(t, filepath.Join(src, "big.orkpack"), entries)
	ref := reg.Ref("packs/big", "v1")
	res, err := Push(ctx, src, ref, plain(reg), WithRangeSize(rangeSize), WithJobs(4), WithCreated(testCreated), WithAnnotator(PackAnnotator))
	if err != nil {
		t.Fatal(err)
	}
	f, _ := res.Artifact.File("big.orkpack")
	if len(f.Ranges) != ranges || f.Form != FormRaw {
		t.Fatalf("%d ranges in a %s layer, want %d in a raw one", len(f.Ranges), f.Form, ranges)
	}
	if f.Extra[AnnotationPackEntries] != strconv.Itoa(entries) {
		t.Errorf("pack annotations %v, want %d entries", f.Extra, entries)
	}
	dst := filepath.Join(t.TempDir(), "out")
	peak := pullInChild(t, ref, dst, reg.Host, 4)
	t.Logf("pull of %d bytes in %d ranges, 4 at once: peak RSS %d MiB", size, ranges, peak>>20)
	if raceEnabled {
		t.Log("-race: the peak RSS is not held to the bound (the detector's shadow memory)")
	} else if peak > 64<<20 {
		t.Errorf("pull of a %d-byte file in %d-byte ranges peaked at %d MiB of RSS: memory must not grow with the file or hold a range", size, rangeSize, peak>>20)
	}
	sameFiles(t, src, dst)
}

// writeLargePack writes a real orkpack of n int8 entries of 8192 x 8192 with random codes in
// [-127, 127] (one entry in memory at a time) and returns its size (n = 8: just over 512 MiB).
func writeLargePack(t testing.TB, path string, n int) int64 {
	t.Helper()
	ctx := context.Background()
	w, err := pack.Create(ctx, path, board.Planner(board.RK3588()))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const k, rows = 8192, 8192
	rng := rand.NewChaCha8([32]byte{42})
	raw := make([]byte, k*rows)
	codes := make([]int8, k*rows)
	scales := make([]float32, rows)
	for i := range scales {
		scales[i] = 0.001 + float32(i%97)/1e4
	}
	for e := 0; e < n; e++ {
		rng.Read(raw)
		for i, b := range raw {
			codes[i] = int8(int(b)%255 - 127)
		}
		var src pack.Digest
		src[0], src[1] = byte(e), 1
		meta := pack.Meta{Name: pack.ExpertName("blk.0.ffn_down_exps.weight", e), DType: pack.I8, K: k, N: rows, QErr: 0.01, Source: src}
		if err := w.Add(ctx, pack.Weight{Meta: meta, Codes: codes, Scales: scales}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
