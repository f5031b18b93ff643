package calib

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
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
