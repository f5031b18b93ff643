package pack_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/zeebo/blake3"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/board"
	"orkpipe/ork/pack"
	"orkpipe/ork/tile"
)

var update = flag.Bool("update", false, "rewrite golden files and fuzz seeds")

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestWriterStreamsBoundedMemory writes a 640 MiB pack (40 entries of 16 MiB; 8 under -race) and
// checks that the writer's retained memory does not grow with the pack: it holds one entry while
// writing it, then only metadata.
func TestWriterStreamsBoundedMemory(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "writes 640 MiB")
	}
	const k, n = 4096, 4096
	count := 40
	if pack.RaceEnabled {
		count = 8 // the detector makes each entry ~9x slower; growth over seven more still shows
	}
	r := rand.New(rand.NewPCG(70, 71))
	wt := quantized(r, "x", pack.I8, k, n, 0, tile.LowFirst) // one caller buffer, reused for every entry
	dir := t.TempDir()
	path := filepath.Join(dir, "big.orkpack")
	w, err := pack.Create(context.Background(), path, board.Planner(board.RK3588()))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	base := liveHeap()
	var afterFirst, peak uint64
	for i := 0; i < count; i++ {
		wt.Name = fmt.Sprintf("blk.%d.ffn_up.weight", i)
		wt.Codes[i] ^= 1 // entries differ
		if err := w.Add(ctx, wt); err != nil {
			t.Fatal(err)
		}
		h := liveHeap()
		if i == 0 {
			afterFirst = h
		}
		peak = max(peak, h)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	entry := int64(k * n) // the writer's one reusable tiling buffer
	held, grow := int64(afterFirst)-int64(base), int64(peak)-int64(afterFirst)
	t.Logf("pack %d MiB, %d entries of %d MiB; writer holds %d KiB after the first entry, grows %d KiB over the other %d",
		st.Size()>>20, count, entry>>20, held>>10, grow>>10, count-1)
	if st.Size() < int64(count)*entry {
		t.Fatalf("pack is %d bytes, want at least %d", st.Size(), int64(count)*entry)
	}
	if held > entry+1<<20 || grow > 1<<20 {
		t.Fatalf("writer holds %d bytes after one entry and grows by %d over %d more: want at most one entry (%d) and no growth", held, grow, count-1, entry)
	}
	pr, err := pack.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := pr.VerifyEntry(ctx, fmt.Sprintf("blk.%d.ffn_up.weight", count-1)); err != nil {
		t.Fatal(err)
	}
}

// TestGoldenPack pins the format: a fixed set of weights must give a pack with this BLAKE3 (update with -update
// only when the format version changes).
func TestGoldenPack(t *testing.T) {
	b := smallPack(t)
	got := pack.Digest(blake3.Sum256(b)).String()
	golden := filepath.Join("testdata", "golden", "small.orkpack.blake3")
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got+"\n" != string(want) {
		t.Fatalf("small pack digest %s, golden %s", got, want)
	}
}

// TestFuzzSeeds regenerates the FuzzOpen corpus in testdata/fuzz/FuzzOpen with -update (all but the seeds
// of earlier versions, "v1-*" and "v2-*", which this package can no longer write) and checks it exists.
func TestFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	if *update {
		// Small seeds (page padding makes every pack at least 4 KiB) keep the fuzzer's minimization quick.
		r := rand.New(rand.NewPCG(90, 91))
		one, err := os.ReadFile(writePack(t, t.TempDir(), []pack.Weight{quantized(r, "blk.0.w#3", pack.I4RotA8, 40, 20, 32, tile.HighFirst)}))
		if err != nil {
			t.Fatal(err)
		}
		two, err := os.ReadFile(writePack(t, t.TempDir(), []pack.Weight{
			quantized(r, "a", pack.I8, 32, 8, 0, tile.LowFirst), quantized(r, "b", pack.F16, 8, 4, 0, tile.LowFirst)}))
		if err != nil {
			t.Fatal(err)
		}
		// activation clips at the ends of their range and one in between
		c1, c2 := quantized(r, "c.0", pack.I4Native, 64, 64, 32, tile.LowFirst), quantized(r, "c.1", pack.I8Rot, 64, 32, 0, tile.LowFirst)
		c1.ActClip, c2.ActClip = 0x1p-24, 1
		c3 := quantized(r, "c.2", pack.I4, 32, 4, 0, tile.LowFirst)
		c3.ActClip = 0.8125
		clipped, err := os.ReadFile(writePack(t, t.TempDir(), []pack.Weight{c1, c2, c3}))
		if err != nil {
			t.Fatal(err)
		}
		resident, err := os.ReadFile(residentPack(t, t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		seeds := map[string][]byte{
			"resident":  resident,
			"one":       one,
			"two":       two,
			"empty":     emptyPack(t),
			"clipped":   clipped,
			"truncated": one[:len(one)/2],
			"header":    one[:pack.HeaderSize],
			"garbage":   append(append([]byte(nil), two...), 1, 2, 3),
		}
		old, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, f := range old {
			if b := filepath.Base(f); !strings.HasPrefix(b, "v1-") && !strings.HasPrefix(b, "v2-") {
				os.Remove(f)
			}
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, s := range seeds {
			if err := os.WriteFile(filepath.Join(dir, name), fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", compactZeros(s)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) < 15 {
		t.Fatalf("fuzz corpus %s: %d seeds, %v (run with -update)", dir, len(ents), err)
	}
}

func emptyPack(t testing.TB) []byte {
	b, err := os.ReadFile(writePack(t, t.TempDir(), nil))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// compactZeros is the inverse of FuzzOpen's expandZeros: runs of 32*c zero bytes (c <= 255) become 0xFE c,
// a literal 0xFE becomes 0xFE 0x00.
func compactZeros(in []byte) []byte {
	var out []byte
	for i := 0; i < len(in); {
		z := 0
		for i+z < len(in) && in[i+z] == 0 && z < 32*255 {
			z++
		}
		switch {
		case z >= 32:
			out = append(out, 0xfe, byte(z/32))
			i += z / 32 * 32
		case in[i] == 0xfe:
			out = append(out, 0xfe, 0)
			i++
		default:
			out = append(out, in[i])
			i++
		}
	}
	return out
}
