package artifacts

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeebo/blake3"

	"orkpipe/internal/testfiles"
)

// TestParallelHashMatchesSerial: the multi-core file hash equals BLAKE3 of the bytes (SumBytes,
// which internal/blake3x's tests hold to zeebo/blake3) at and around piece boundaries, for any worker count.
func TestParallelHashMatchesSerial(t *testing.T) {
	data := pattern("pieces", 3*PieceSize+5000)
	dir := t.TempDir()
	for _, n := range []int{PieceSize + 1, PieceSize + 1024, 2 * PieceSize, 2*PieceSize + 1, 3*PieceSize + 5000} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, data[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		want := SumBytes(data[:n])
		for _, workers := range []int{2, 3, 8} {
			got, err := hashParallel(context.Background(), f, int64(n), workers)
			if err != nil || got != want {
				t.Fatalf("%d bytes, %d workers: %v, %v; want %v", n, workers, got, err, want)
			}
		}
		if got, err := hashSerial(context.Background(), f, int64(n)); err != nil || got != want {
			t.Fatalf("%d bytes serial: %v, %v; want %v", n, got, err, want)
		}
		// A file shorter than claimed (truncated meanwhile) is an error, not a digest.
		if _, err := hashParallel(context.Background(), f, int64(n)+PieceSize, 2); err == nil {
			t.Fatalf("%d bytes hashed as %d: no error", n, n+PieceSize)
		}
		f.Close()
	}
}

// TestParallelHashHoles: files with whole pieces in holes (hashed from the remembered zero-piece
// chaining values, see zeroPieceCV) hash like their logical bytes, the first time and again, at
// every hole position and with a partial last piece; the remembered values equal fresh ones.
func TestParallelHashHoles(t *testing.T) {
	dir := t.TempDir()
	data := pattern("holes", PieceSize)
	for _, tc := range []struct {
		name   string
		pieces []bool // true: data in that piece; false: a hole
		tail   int64  // bytes of a last, partial piece (data)
	}{
		{"hole first", []bool{false, true, true}, 0},
		{"hole in the middle", []bool{true, false, false, true}, 100},
		{"hole at the end", []bool{true, true, false, false}, 0},
		{"all holes", []bool{false, false, false}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "f")
			os.Remove(p)
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			size := int64(len(tc.pieces))*PieceSize + tc.tail
			logical := make([]byte, size)
			for i, d := range tc.pieces {
				if d {
					copy(logical[int64(i)*PieceSize:], data)
					if _, err := f.WriteAt(data, int64(i)*PieceSize); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.tail > 0 {
				copy(logical[size-tc.tail:], data[:tc.tail])
				if _, err := f.WriteAt(data[:tc.tail], size-tc.tail); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Truncate(size); err != nil {
				t.Fatal(err)
			}
			want := SumBytes(logical)
			for round := range 2 {
				if got, err := hashParallel(context.Background(), f, size, 2); err != nil || got != want {
					t.Fatalf("round %d: %v, %v; want %v", round, got, err, want)
				}
			}
		})
	}
	for _, off := range []int64{0, PieceSize, 7 * PieceSize} {
		fresh := SubtreeCV(make([]byte, PieceSize), uint64(off/ChunkSize))
		if a, b := zeroPieceCV(off, PieceSize), zeroPieceCV(off, PieceSize); a != fresh || b != fresh {
			t.Errorf("zero piece at %d: %x, %x; want %x", off, a, b, fresh)
		}
	}
}

// TestHashSection: a section of a file hashes like its bytes alone (SumBytes), pieced from its own
// start, mapped or read, for offsets off any page or piece boundary, lengths at and around piece
// boundaries, and a section whose pieces lie in a hole; a section past the end of the file is an
// error.
func TestHashSection(t *testing.T) {
	const size = 4*PieceSize + 7000
	data := pattern("section", size)
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	for _, off := range []int64{0, 1, 32, 4095, 4096, PieceSize - 3, PieceSize + 12345} {
		for _, n := range []int64{0, 1, 1025, PieceSize, PieceSize + 1, 2*PieceSize + 777, 3 * PieceSize} {
			if off+n > size {
				continue
			}
			want := SumBytes(data[off : off+n])
			for _, mode := range pieceModes {
				hashMode = mode
				got, err := HashSection(ctx, f, off, n)
				hashMode = probePieces
				if err != nil || got != want {
					t.Fatalf("section [%d, +%d) %v: %v, %v; want %v", off, n, mode, got, err, want)
				}
			}
		}
		if _, err := HashSection(ctx, f, off, size-off+1); err == nil {
			t.Fatalf("section [%d, +%d) of a %d-byte file: no error", off, size-off+1, size)
		}
	}

	// A section whose middle pieces lie in a hole: 6 pieces of file, data in the first and last.
	hp := filepath.Join(t.TempDir(), "holes")
	h, err := os.Create(hp)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	logical := make([]byte, 6*PieceSize)
	copy(logical, data[:PieceSize])
	copy(logical[5*PieceSize:], data[PieceSize:2*PieceSize])
	if _, err := h.WriteAt(logical[:PieceSize], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt(logical[5*PieceSize:], 5*PieceSize); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 100, PieceSize} {
		n := int64(len(logical)) - off - 50
		if got, err := HashSection(ctx, h, off, n); err != nil || got != SumBytes(logical[off:off+n]) {
			t.Fatalf("sparse section [%d, +%d): %v, %v", off, n, got, err)
		}
	}
}

// TestParallelHashGroups: files of several mapping groups (minGroup pieces) hash like their
// logical bytes for any worker count — all data, a hole inside one group (that group goes piece by
// piece), a partial last group with a short last piece — and a file shorter than claimed is an
// error.
func TestParallelHashGroups(t *testing.T) {
	const pieces = 3*minGroup + 2
	size := int64(pieces)*PieceSize + 777
	data := pattern("groups", int(size))
	for _, tc := range []struct {
		name string
		hole int64 // index of a piece left as a hole, or -1
	}{{"all data", -1}, {"hole in the second group", minGroup + 1}, {"hole in the last group", 3 * minGroup}} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "f")
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			logical := append([]byte(nil), data...)
			for i := int64(0); i <= pieces; i++ {
				lo, hi := i*PieceSize, min((i+1)*PieceSize, size)
				if i == tc.hole {
					clear(logical[lo:hi])
					continue
				}
				if _, err := f.WriteAt(logical[lo:hi], lo); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Truncate(size); err != nil {
				t.Fatal(err)
			}
			want := SumBytes(logical)
			for _, workers := range []int{1, 2, 3, 16} {
				if got, err := hashParallel(context.Background(), f, size, workers); err != nil || got != want {
					t.Fatalf("%d workers: %v, %v; want %v", workers, got, err, want)
				}
			}
			if _, err := hashParallel(context.Background(), f, size+minGroup*PieceSize, 2); err == nil {
				t.Fatalf("%d bytes hashed as %d: no error", size, size+minGroup*PieceSize)
			}
		})
	}
}

// TestHashPathPeakRSS: hashing a file from its mapping keeps only the groups being hashed resident
// (each is dropped from the mapping after its hash): a child process hashing a 1 GiB file in the
// page cache with two workers peaks below two takes (plus the process itself) for each budget,
// including the hash command's 512 MiB, whose first takes (256 MiB and 192 MiB) the file is large
// enough to reach. Without dropPages the whole file would end up resident.
func TestHashPathPeakRSS(t *testing.T) {
	if raceEnabled {
		testfiles.SkipBuild(t, "a -race build: the race detector's shadow memory inflates the child's VmHWM; the bound is checked without -race")
	}
	const size = 1 << 30
	p := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	h := blake3.New()
	if _, err := io.Copy(io.MultiWriter(f, h), newPatternReader("rss", size)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := Digest{}
	copy(want.sum[:], h.Sum(nil))
	for _, resident := range []int64{0, 128 << 20, 512 << 20} {
		cmd := testfiles.SelfCommand("-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=hash-rss", "FILE="+p, "GOMAXPROCS=2", fmt.Sprintf("RESIDENT=%d", resident))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		var digest string
		var hwm int64
		if _, err := fmt.Sscanf(string(out), "%s %d", &digest, &hwm); err != nil {
			t.Fatalf("child output %q: %v", out, err)
		}
		if digest != want.String() {
			t.Fatalf("child hashed %s, want %s", digest, want)
		}
		// Two workers with their takes resident, plus the test binary itself.
		SetHashResident(resident)
		limit := 2*groupPieces(2)*PieceSize + 64<<20
		SetHashResident(0)
		if hwm > limit {
			t.Fatalf("resident budget %d MiB: peak RSS %d MiB hashing a %d MiB file, want at most %d MiB", resident>>20, hwm>>20, size>>20, limit>>20)
		}
		t.Logf("resident budget %d MiB: peak RSS %d MiB hashing %d MiB", resident>>20, hwm>>20, size>>20)
	}
}

// hashPeakRSS is the child of TestHashPathPeakRSS: it hashes path and prints the digest and the
// process's peak RSS in bytes.
func hashPeakRSS(ctx context.Context, path string) error {
	resident, err := strconv.ParseInt(os.Getenv("RESIDENT"), 10, 64)
	if err != nil {
		return err
	}
	SetHashResident(resident)
	o, err := HashPath(ctx, path)
	if err != nil {
		return err
	}
	n, err := testfiles.StatusKB("VmHWM")
	if err != nil {
		return err
	}
	fmt.Println(o.Digest, n<<10)
	return nil
}

// TestHashSmall: files of at most a piece hash as zeebo/blake3 hashes their bytes (around the
// chunk, group and read-block boundaries, and with a hole), a file shorter than claimed is an
// error, and hashing a whole piece allocates a small fraction of it (no 4 MiB read-ahead blocks,
// which started a garbage collection for every small file).
func TestHashSmall(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := pattern("small", PieceSize)
	for _, n := range []int{0, 1, ChunkSize, ChunkSize + 1, groupLen + 3, smallBlock - 1, smallBlock, smallBlock + 1, 3*smallBlock + 77, PieceSize - 1, PieceSize} {
		p := filepath.Join(dir, fmt.Sprintf("f%d", n))
		if err := os.WriteFile(p, data[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := hashSmall(ctx, f, int64(n)); err != nil || got.sum != blake3.Sum256(data[:n]) {
			t.Fatalf("%d bytes: %v, %v; want %x", n, got, err, blake3.Sum256(data[:n]))
		}
		if _, err := hashSmall(ctx, f, int64(n)+1); err == nil || !strings.Contains(err.Error(), p) {
			t.Fatalf("%d bytes hashed as %d: %v, want an error naming the file", n, n+1, err)
		}
		f.Close()
	}
	// A hole in the middle reads as zeros.
	p := filepath.Join(dir, "holes")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := make([]byte, 3*smallBlock+10)
	copy(want, data[:1000])
	copy(want[len(want)-500:], data[1000:1500])
	f.WriteAt(want[:1000], 0)
	f.WriteAt(want[len(want)-500:], int64(len(want)-500))
	if got, err := hashSmall(ctx, f, int64(len(want))); err != nil || got.sum != blake3.Sum256(want) {
		t.Fatalf("sparse file: %v, %v; want %x", got, err, blake3.Sum256(want))
	}
	// Allocation of hashing a whole piece, through the public path.
	big := filepath.Join(dir, fmt.Sprintf("f%d", PieceSize))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := HashPath(ctx, big); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if a := after.TotalAlloc - before.TotalAlloc; a > PieceSize/4 {
		t.Fatalf("hashing a %d-byte file allocated %d bytes", PieceSize, a)
	}
}

// TestNextTake: the takes of a hash cover its pieces once, in order, none larger than the group
// size, no larger than a (2·workers)-th of what is left, and the last ones single pieces; for the
// workers of this package the group size keeps the resident bound.
func TestNextTake(t *testing.T) {
	for _, tc := range []struct {
		n       int64
		workers int
	}{{1, 1}, {2, 2}, {5, 2}, {14, 1}, {14, 3}, {512, 2}, {513, 2}, {7000, 16}, {100, 64}} {
		k := groupPieces(tc.workers)
		var next atomic.Int64
		var takes []int64
		for want := int64(0); ; {
			from, to := nextTake(&next, tc.n, k, tc.workers)
			if from >= tc.n {
				if want != tc.n {
					t.Fatalf("n %d, %d workers: done at %d", tc.n, tc.workers, want)
				}
				break
			}
			if from != want || to <= from || to > tc.n || to-from > k || to-from > max(1, (tc.n-from)/int64(2*tc.workers)) {
				t.Fatalf("n %d, %d workers, group %d: take [%d, %d) after %d", tc.n, tc.workers, k, from, to, want)
			}
			takes = append(takes, to-from)
			want = to
		}
		if last := takes[len(takes)-1]; last != 1 {
			t.Errorf("n %d, %d workers: last take %d pieces, want 1", tc.n, tc.workers, last)
		}
		if tc.n >= 4*k*int64(tc.workers) && takes[0] != k {
			t.Errorf("n %d, %d workers: first take %d pieces, want %d", tc.n, tc.workers, takes[0], k)
		}
	}
	for _, tc := range []struct {
		resident int64
		want     map[int]int64 // workers: pieces per take
	}{
		{0, map[int]int64{1: minGroup, 2: minGroup, 64: minGroup}},
		{128 << 20, map[int]int64{1: 32, 2: 16, 4: 8, 8: minGroup, 64: minGroup}},
		{512 << 20, map[int]int64{1: maxGroup, 2: maxGroup, 4: 32, 8: 16, 64: minGroup}},
	} {
		SetHashResident(tc.resident)
		for workers, want := range tc.want {
			if got := groupPieces(workers); got != want {
				t.Errorf("resident %d MiB: groupPieces(%d) = %d, want %d", tc.resident>>20, workers, got, want)
			}
		}
	}
	SetHashResident(0)
}

// pieceModes are the ways hashRange reads pieces; tests hash with each.
var pieceModes = []pieceMode{probePieces, readPieces, mapPieces}

// TestModeProbe: the probe times probeTakes takes of each way (mapped first), maps the takes that
// come while both ways' probes run, does not count a probe that read nothing (holes), keeps each
// way's best rate (a worker's first read take also faults in its buffer), and then maps unless
// reading probed readMargin times faster.
func TestModeProbe(t *testing.T) {
	for _, tc := range []struct {
		readRate, mapRate int64 // bytes per second, the best probe of each
		want              bool  // mapped
	}{{200, 100, false}, {100, 200, true}, {100, 100, true}, {170, 100, true}, {181, 100, false}} {
		var p modeProbe
		for i := range probeTakes {
			if m, probe := p.pick(); !m || !probe {
				t.Fatalf("pick %d: mapped %v, probe %v; want a probe of mapped", 2*i, m, probe)
			}
			if m, probe := p.pick(); m || !probe {
				t.Fatalf("pick %d: mapped %v, probe %v; want a probe of read", 2*i+1, m, probe)
			}
			if m, probe := p.pick(); !m || probe {
				t.Fatalf("pick while both probes run: mapped %v, probe %v; want mapped, untimed", m, probe)
			}
			p.record(false, 0, time.Second) // a probe of read that met only holes
			if m, probe := p.pick(); m || !probe {
				t.Fatalf("pick after an empty probe: mapped %v, probe %v; want read probed again", m, probe)
			}
			if i == 0 { // the first takes: slower than the best, read the slowest of all
				p.record(true, tc.mapRate/2, time.Second)
				p.record(false, 1, time.Second)
				continue
			}
			p.record(true, tc.mapRate, time.Second)
			p.record(false, tc.readRate, time.Second)
		}
		for range 3 {
			if m, probe := p.pick(); m != tc.want || probe {
				t.Fatalf("read %d B/s, mapped %d B/s: pick mapped %v, probe %v; want mapped %v", tc.readRate, tc.mapRate, m, probe, tc.want)
			}
		}
	}
}

// TestHashRangeProbe: a hash long enough for its probe to choose does choose (one worker),
// and a hash continued either way after the choice (a probe that chose reading, one that chose
// mapping) gives the serial digest, with a hole in the middle of the file and 1, 2 and 3 workers.
func TestHashRangeProbe(t *testing.T) {
	const size = 24*PieceSize + 5000
	data := pattern("probe", size)
	clear(data[9*PieceSize : 13*PieceSize])
	p := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data[:9*PieceSize], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data[13*PieceSize:], 13*PieceSize); err != nil { // [9, 13) pieces stay a hole
		t.Fatal(err)
	}
	want := SumBytes(data)
	defer func(old func() *modeProbe) { newProbe = old }(newProbe)
	for _, start := range []struct {
		name       string
		done, mapd bool
	}{{"fresh", false, false}, {"chose read", true, false}, {"chose mapped", true, true}} {
		for _, workers := range []int{1, 2, 3} {
			var last *modeProbe
			newProbe = func() *modeProbe { last = &modeProbe{done: start.done, mapd: start.mapd}; return last }
			got, err := hashParallel(context.Background(), f, size, workers)
			if err != nil || got != want {
				t.Fatalf("probe %s, %d workers: %v, %v; want %v", start.name, workers, got, err, want)
			}
			// With more than one worker, a take that finds a way's probe running and the other's
			// done hashes a whole group unprobed, and a mapped probe over the hole measures nothing:
			// when one worker's probe is slow (a loaded host; one run in ten under -race with three
			// workers, seen with two in CI beside other work) the others reach the end before the
			// probe has its takes. So only one worker, whose takes are in order (mapped [0, 4) and
			// [4, 8), read 8, then 13 past the hole), must have chosen.
			if !last.done && workers == 1 {
				t.Errorf("probe %s, %d workers: %d pieces hashed and the probe never chose (rates %v, probes %v)", start.name, workers, size/PieceSize, last.rate, last.n)
			}
		}
	}
}
