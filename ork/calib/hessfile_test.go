package calib

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/zeebo/blake3"

	"orkpipe/internal/hugebuf"
)

// hessianFileBytes returns a valid Hessian file of a K x K Hessian with k+1 tokens of distinct
// values.
func hessianFileBytes(t testing.TB, k int) []byte {
	t.Helper()
	h := NewHessian(k)
	x := make([]float32, k*(k+1))
	for i := range x {
		x[i] = float32(i%13) - 6 + float32(i%7)/8
	}
	if err := h.Add(x); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteHessian(&buf, h); err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != HessianFileSize(k) {
		t.Fatalf("WriteHessian wrote %d bytes, HessianFileSize(%d) = %d", buf.Len(), k, HessianFileSize(k))
	}
	return buf.Bytes()
}

// TestReadHessianSizeChecks: K from the header is believed only when the file size matches it
// exactly; the errors name the file and the K field.
func TestReadHessianSizeChecks(t *testing.T) {
	good := hessianFileBytes(t, 6)
	withK := func(k uint32) []byte {
		b := bytes.Clone(good)
		binary.LittleEndian.PutUint32(b[12:], k)
		return b
	}
	for _, c := range []struct {
		name string
		b    []byte
		size int64 // -1: len(b)
		want error
		msg  string
	}{
		{"K larger than the file", withK(1 << 18), -1, ErrFormat, "header field K = 262144 needs exactly"},
		{"K smaller than the file", withK(5), -1, ErrFormat, "header field K = 5 needs exactly"},
		{"K zero", withK(0), -1, ErrFormat, "K = 0"},
		{"K above the limit", withK(1<<18 + 1), -1, ErrFormat, "want 0 < K <= 262144"},
		{"truncated digest", good[:len(good)-1], -1, ErrFormat, "needs exactly"},
		{"trailing byte", append(bytes.Clone(good), 0), -1, ErrFormat, "needs exactly"},
		{"header only", good[:headerSize], -1, ErrFormat, "needs exactly"},
		{"short header", good[:headerSize-1], -1, ErrFormat, "hessian header"},
		{"size lies: larger than the data", good, int64(len(good)) + 8, ErrFormat, "needs exactly"},
		{"digest of other content", func() []byte { b := bytes.Clone(good); b[len(b)-1] ^= 0x80; return b }(), -1, ErrCorrupt, "BLAKE3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			size := c.size
			if size < 0 {
				size = int64(len(c.b))
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := ReadHessian(context.Background(), bytes.NewReader(c.b), size, "m.hessian")
			runtime.ReadMemStats(&after)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), "m.hessian") || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %v, want %v naming m.hessian and containing %q", err, c.want, c.msg)
			}
			// a lying header must not make ReadHessian allocate what the header claims (K = 2^18 is 512 GiB)
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
				t.Errorf("allocated %d bytes for a %d-byte file", grew, len(c.b))
			}
		})
	}
}

// TestReadHessianFile round-trips through a real file, allocating the K x K matrix once.
func TestReadHessianFile(t *testing.T) {
	const k = 300
	b := hessianFileBytes(t, k)
	path := filepath.Join(t.TempDir(), "blk.0.ffn_down.hessian")
	if err := os.WriteFile(path, b, 0o444); err != nil {
		t.Fatal(err)
	}
	want, err := ReadHessian(context.Background(), bytes.NewReader(b), int64(len(b)), "bytes")
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, err := ReadHessianFile(context.Background(), path)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if got.K != k || got.Tokens != k+1 || !equalF64(got.Data, want.Data) {
		t.Fatalf("read K=%d tokens=%d, want K=%d tokens=%d and the same values", got.K, got.Tokens, k, k+1)
	}
	// one K²·8 matrix plus the 1 MiB read buffer and small change; the old row-by-row append
	// allocated about twice the matrix
	if grew, limit := after.TotalAlloc-before.TotalAlloc, uint64(k*k*8+(1<<20)+64<<10); grew > limit {
		t.Errorf("ReadHessianFile allocated %d bytes, want <= %d (K²·8 = %d once, a 1 MiB buffer)", grew, limit, k*k*8)
	}
	if _, err := ReadHessianFile(context.Background(), filepath.Join(t.TempDir(), "missing.hessian")); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.hessian") {
		t.Errorf("missing file: %v, want ErrNotExist naming it", err)
	}
}

// TestReadHessianChunks: a triangle read in several chunks, converted on one goroutine and on several,
// is the matrix written, value for value — chunks that end inside a row and on a row's end, a last
// chunk shorter than the others, K of one value (float32 values, so the round trip is exact).
func TestReadHessianChunks(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	// 724: 262,450 values, one chunk (262,144) and a bit; 1100: 605,550 values, three chunks.
	for _, k := range []int{1, 2, 511, 724, 1100} {
		h := NewHessian(k)
		h.Tokens = 3
		for i := 0; i < k; i++ {
			for j := i; j < k; j++ {
				v := float64(float32(float64(i)*1.5 + float64(j)/float64(k+1) + 1))
				h.Data[i*k+j], h.Data[j*k+i] = v, v
			}
		}
		var buf bytes.Buffer
		if err := WriteHessian(&buf, h); err != nil {
			t.Fatal(err)
		}
		for _, procs := range []int{1, 2, 3} {
			runtime.GOMAXPROCS(procs)
			got, err := ReadHessian(context.Background(), bytes.NewReader(buf.Bytes()), int64(buf.Len()), "chunks")
			if err != nil {
				t.Fatalf("K %d, %d procs: %v", k, procs, err)
			}
			for i, v := range got.Data {
				if v != h.Data[i] {
					t.Fatalf("K %d, %d procs: H[%d][%d] = %v, want %v", k, procs, i/k, i%k, v, h.Data[i])
				}
			}
		}
	}
}

// TestUpperAt: the place of every value of small triangles.
func TestUpperAt(t *testing.T) {
	for k := 1; k <= 9; k++ {
		v := int64(0)
		for i := 0; i < k; i++ {
			for j := i; j < k; j++ {
				if r, c := upperAt(k, v); r != i || c != j {
					t.Fatalf("K %d: value %d is H[%d][%d], upperAt says H[%d][%d]", k, v, i, j, r, c)
				}
				v++
			}
		}
		if v != triangle(k) {
			t.Fatalf("K %d: %d values, triangle says %d", k, v, triangle(k))
		}
	}
}

// TestReadHessianFileHuge reads what ReadHessianFile reads with the matrix off the Go heap, held
// against the process's memory limit until freed — on an error too, where the caller gets nothing to
// free.
func TestReadHessianFileHuge(t *testing.T) {
	const k = 600 // 2.9 MB of float64: above hugebuf.Min, so a mapping where the OS makes them
	b := hessianFileBytes(t, k)
	dir := t.TempDir()
	path, bad := filepath.Join(dir, "blk.0.ffn_down.hessian"), filepath.Join(dir, "bad.hessian")
	corrupt := bytes.Clone(b)
	corrupt[headerSize+4*k] ^= 1 // a value the digest covers
	if err := errors.Join(os.WriteFile(path, b, 0o444), os.WriteFile(bad, corrupt, 0o444)); err != nil {
		t.Fatal(err)
	}
	want, err := ReadHessianFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 1 << 40
	prev := debug.SetMemoryLimit(limit)
	defer debug.SetMemoryLimit(prev)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, free, err := ReadHessianFileHuge(context.Background(), path)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if got.K != k || got.Tokens != want.Tokens || !equalF64(got.Data, want.Data) {
		t.Fatalf("read K=%d tokens=%d, want K=%d tokens=%d and ReadHessianFile's values", got.K, got.Tokens, k, want.Tokens)
	}
	mapped := runtime.GOOS == "linux"
	if grew := after.TotalAlloc - before.TotalAlloc; mapped && grew > 2<<20 {
		t.Errorf("the Go heap grew by %d bytes: the %d-byte matrix belongs outside it", grew, k*k*8)
	}
	if held := limit - debug.SetMemoryLimit(-1); mapped && (held < k*k*8 || held >= k*k*8+hugebuf.Min) {
		t.Errorf("memory limit lowered by %d bytes while the matrix is held, want its %d rounded up to whole huge pages", held, k*k*8)
	}
	free()
	free() // a second call does nothing
	if l := debug.SetMemoryLimit(-1); l != limit {
		t.Errorf("memory limit %d after free, want %d", l, limit)
	}
	h, free2, err := ReadHessianFileHuge(context.Background(), bad)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), bad) || h != nil || free2 != nil {
		t.Errorf("corrupt file: %v, %v, free %v; want ErrCorrupt naming %s and nothing to free", h, err, free2 != nil, bad)
	}
	if l := debug.SetMemoryLimit(-1); l != limit {
		t.Errorf("memory limit %d after a failed read, want %d (the matrix freed)", l, limit)
	}
}

// TestReadHessianCancel: a cancelled context stops the read with ctx.Err naming the file.
func TestReadHessianCancel(t *testing.T) {
	b := hessianFileBytes(t, 400) // 1.28 MB of values: more than one read chunk
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := ReadHessian(ctx, bytes.NewReader(b), int64(len(b)), "c.hessian")
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "c.hessian") {
		t.Fatalf("error %v, want context.Canceled naming c.hessian", err)
	}
}

func BenchmarkReadHessianFile(b *testing.B) {
	for _, k := range []int{1024, 4096} {
		b.Run(fmt.Sprint("K=", k), func(b *testing.B) {
			h := NewHessian(k)
			for i := 0; i < k; i++ {
				h.Data[i*k+i] = float64(i + 1)
			}
			path := filepath.Join(b.TempDir(), "h")
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := WriteHessian(f, h); err != nil {
				b.Fatal(err)
			}
			f.Close()
			b.SetBytes(HessianFileSize(k))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ReadHessianFile(context.Background(), path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestWriteHessianPieces: the pieces converted side by side are written in row order — the file equals
// a plain row-by-row encoding (header, float32 upper triangle, BLAKE3 of both) for triangles of one
// piece and of several, on one goroutine and on several — and of several bad values the error names the
// first in row order, not the first a goroutine found.
func TestWriteHessianPieces(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, k := range []int{1, 7, 1100, 2100} { // 2100: 8.8 MB of triangle, three pieces
		h := NewHessian(k)
		h.Tokens = int64(k)
		for i := range h.Data {
			h.Data[i] = float64(i%1009)*1.25e-3 + float64(i/k)
		}
		for _, procs := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("K%d/procs%d", k, procs), func(t *testing.T) {
				runtime.GOMAXPROCS(procs)
				var buf bytes.Buffer
				if err := WriteHessian(&buf, h); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf.Bytes(), plainHessianFile(h)) {
					t.Fatalf("%d bytes differ from the row-by-row encoding (%d bytes)", buf.Len(), len(plainHessianFile(h)))
				}
			})
		}
	}
	const k = 2100
	h := NewHessian(k)
	h.Data[2000*k+2050] = math.Inf(-1) // the last piece
	h.Data[1500*k+1600] = math.NaN()   // the second piece
	h.Data[1500*k+1500] = -1           // the same row, earlier: the first bad value
	for _, procs := range []int{1, 2, 3} {
		runtime.GOMAXPROCS(procs)
		err := WriteHessian(io.Discard, h)
		if !errors.Is(err, ErrNotFinite) || !strings.Contains(err.Error(), "(1500,1500) = -1") {
			t.Errorf("procs %d: error %v, want the negative diagonal at (1500,1500)", procs, err)
		}
	}
}

// plainHessianFile is the Hessian file of h encoded the plain way: header, the float32 upper
// triangle row by row, BLAKE3 of both.
func plainHessianFile(h *Hessian) []byte {
	var b []byte
	b = append(b, hessianMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, hessianVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.K))
	b = binary.LittleEndian.AppendUint64(b, uint64(h.Tokens))
	b = binary.LittleEndian.AppendUint64(b, 0)
	for i := range h.K {
		for _, x := range h.Data[i*h.K+i : (i+1)*h.K] {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(x)))
		}
	}
	sum := blake3.Sum256(b)
	return append(b, sum[:]...)
}

// TestEncodeHessianRanges: EncodeHessian of any 4-byte-aligned cut of a file's bytes gives the plain
// encoding's bytes (ranges across the header's end, inside a row, across rows, one value), and it
// refuses ranges that are not whole values or reach past the values.
func TestEncodeHessianRanges(t *testing.T) {
	for _, k := range []int{1, 2, 7, 300} {
		h := NewHessian(k)
		h.Tokens = int64(3 * k)
		for i := range h.Data {
			h.Data[i] = float64(i%1009)*1.25e-3 + float64(i/k)
		}
		want := plainHessianFile(h)
		size := HessianDataSize(k)
		if int64(len(want)) != size+digestSize {
			t.Fatalf("K=%d: plain file %d bytes, HessianDataSize %d + digest", k, len(want), size)
		}
		for _, step := range []int64{4, 8, 20, 36, 1000, 4096, size} {
			got := make([]byte, size)
			for off := int64(0); off < size; off += step {
				end := min(size, off+step)
				if err := EncodeHessian(h, got[off:end], off); err != nil {
					t.Fatalf("K=%d: bytes [%d, %d): %v", k, off, end, err)
				}
			}
			if !bytes.Equal(got, want[:size]) {
				t.Fatalf("K=%d, cut every %d bytes: differs from the plain encoding", k, step)
			}
		}
		for _, c := range []struct{ off, n int64 }{{2, 4}, {0, 6}, {size - 4, 8}, {-4, 4}, {size, 4}} {
			if err := EncodeHessian(h, make([]byte, c.n), c.off); !errors.Is(err, ErrShape) {
				t.Errorf("K=%d, %d bytes at %d: %v, want ErrShape", k, c.n, c.off, err)
			}
		}
	}
	h := NewHessian(300)
	h.Data[200*300+250] = math.NaN()
	off := headerSize + 4*(rowStart(300, 200)+50)
	if err := EncodeHessian(h, make([]byte, 8), off-4); !errors.Is(err, ErrNotFinite) || !strings.Contains(err.Error(), "(200,250)") {
		t.Errorf("NaN at (200,250): %v, want ErrNotFinite naming it", err)
	}
	if err := EncodeHessian(h, make([]byte, 8), off+4); err != nil {
		t.Errorf("a range after the NaN: %v", err)
	}
}
