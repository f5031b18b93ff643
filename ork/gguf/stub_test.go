package gguf

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

var matmulRE = regexp.MustCompile(`^blk\.\d+\.(attn_(q|k|v|output)|ffn_(gate|up|down))\.weight$`)

func emitStoriesStub(t *testing.T) (*File, NameSet, string, StubResult) {
	t.Helper()
	ctx := context.Background()
	src := openT(t, "stories260K.gguf")
	owned, err := MatchTensors(src, matmulRE)
	if err != nil {
		t.Fatal(err)
	}
	if len(owned) != 35 {
		t.Fatalf("owned %d tensors, want 35 (7 matmul weights x 5 blocks)", len(owned))
	}
	dst := filepath.Join(t.TempDir(), "stub.gguf")
	res, err := EmitStub(ctx, src, owned, dst)
	if err != nil {
		t.Fatal(err)
	}
	return src, owned, dst, res
}

func readRange(t *testing.T, path string, off, n int64) []byte {
	t.Helper()
	fd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	b := make([]byte, n)
	if _, err := fd.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEmitStub(t *testing.T) {
	src, owned, dst, res := emitStoriesStub(t)
	st, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != src.Size || res.Size != src.Size {
		t.Fatalf("stub is %d bytes, source %d", st.Size(), src.Size)
	}
	// Header bytes identical.
	if !bytes.Equal(readRange(t, dst, 0, src.DataOffset), readRange(t, src.Path, 0, src.DataOffset)) {
		t.Fatal("header region differs from the source")
	}
	var ownedBytes int64
	for _, ti := range src.Tensors {
		start, _ := src.DataRange(ti)
		got := readRange(t, dst, start, ti.Size)
		if owned.Has(ti.Name) {
			ownedBytes += ti.Size
			if firstNonZero(got) >= 0 {
				t.Errorf("owned %s is not zero", ti.Name)
			}
		} else if !bytes.Equal(got, readRange(t, src.Path, start, ti.Size)) {
			t.Errorf("non-owned %s differs from the source", ti.Name)
		}
	}
	if ownedBytes != res.OwnedBytes || len(res.Owned) != 35 {
		t.Errorf("result owned %d bytes / %d tensors, want %d / 35", res.OwnedBytes, len(res.Owned), ownedBytes)
	}
	// Sparse: allocated bytes are about length - owned.
	allocated := st.Sys().(*syscall.Stat_t).Blocks * 512
	t.Logf("stub length %d, allocated %d, owned %d, length-allocated %d", st.Size(), allocated, ownedBytes, st.Size()-allocated)
	if hole := st.Size() - allocated; float64(hole) < 0.9*float64(ownedBytes) {
		t.Errorf("stub is not sparse: length %d - allocated %d = %d, want about the owned %d", st.Size(), allocated, hole, ownedBytes)
	}
	// VerifyStub passes, with the source's header digest, reading no hole.
	d, err := src.HeaderDigest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d != res.HeaderDigest {
		t.Error("result header digest differs from the source's")
	}
	rep, err := VerifyStub(context.Background(), dst, owned, WithSourceHeaderDigest(d))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("verify: %d tensors, %d owned, %d data bytes read", rep.Tensors, rep.Owned, rep.DataBytesRead)
	if rep.DataBytesRead >= src.Size-src.DataOffset-ownedBytes/2 {
		t.Errorf("verify read %d data bytes: holes were read", rep.DataBytesRead)
	}
	// The destination now exists. The same stub again finds it already there and leaves it as it is;
	// another stub of the same length (another owned set) is refused and leaves it alone; neither
	// leaves a temp file behind.
	st0, _ := os.Stat(dst)
	if res, err := EmitStub(context.Background(), src, owned, dst); err != nil || !res.Unchanged {
		t.Errorf("the same stub again: %+v, %v; want Unchanged", res, err)
	}
	if st1, _ := os.Stat(dst); !os.SameFile(st0, st1) || st1.ModTime() != st0.ModTime() {
		t.Error("the same stub again rewrote the file")
	}
	before, _ := os.ReadFile(dst)
	if _, err := EmitStub(context.Background(), src, NewNameSet("blk.0.ffn_down.weight"), dst); !errors.Is(err, os.ErrExist) {
		t.Errorf("another stub over it: %v, want ErrExist", err)
	}
	if after, _ := os.ReadFile(dst); !bytes.Equal(before, after) {
		t.Error("a refused emit changed the existing stub")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".*tmp*")); len(left) > 0 {
		t.Errorf("temp files left behind: %v", left)
	}
	if _, err := EmitStub(context.Background(), src, NewNameSet("no.such.weight"), dst+".2"); !errors.Is(err, ErrTensorNotFound) {
		t.Errorf("unknown owned name: %v", err)
	}
	if _, err := os.Stat(dst + ".2"); !os.IsNotExist(err) {
		t.Errorf("failed emit left %s behind", dst+".2")
	}
}

// writableCopy copies path to a new writable file.
func writableCopy(t *testing.T, path string) string {
	t.Helper()
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	p := filepath.Join(t.TempDir(), "copy.gguf")
	out, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
	return p
}

func TestVerifyStubFailures(t *testing.T) {
	ctx := context.Background()
	src, owned, dst, _ := emitStoriesStub(t)
	overwrite := func(path, tensor string, b byte) {
		ti, err := src.Tensor(tensor)
		if err != nil {
			t.Fatal(err)
		}
		fd, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer fd.Close()
		start, _ := src.DataRange(ti)
		if _, err := fd.WriteAt(bytes.Repeat([]byte{b}, int(ti.Size)), start); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("zeroed non-owned tensor", func(t *testing.T) {
		p := writableCopy(t, dst)
		overwrite(p, "blk.2.ffn_norm.weight", 0)
		_, err := VerifyStub(ctx, p, owned)
		if !errors.Is(err, ErrStub) || !strings.Contains(err.Error(), `tensor "blk.2.ffn_norm.weight": not owned by the pack and all zero`) {
			t.Fatalf("err = %v", err)
		}
		if _, err := VerifyStub(ctx, p, owned, WithAllowZero("blk.2.ffn_norm.weight")); err != nil {
			t.Errorf("allow-listed zero tensor: %v", err)
		}
	})
	t.Run("owned tensor not zero", func(t *testing.T) {
		p := writableCopy(t, dst)
		overwrite(p, "blk.4.attn_k.weight", 7)
		_, err := VerifyStub(ctx, p, owned)
		if !errors.Is(err, ErrStub) || !strings.Contains(err.Error(), `tensor "blk.4.attn_k.weight": owned by the pack but its data is not zero`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("stub without its pack", func(t *testing.T) {
		// Verifying against an empty owned set: every hole is an all-zero non-owned tensor.
		_, err := VerifyStub(ctx, dst, NameSet{})
		if !errors.Is(err, ErrStub) || !strings.Contains(err.Error(), "35 problem(s)") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("truncated", func(t *testing.T) {
		p := writableCopy(t, dst)
		if err := os.Truncate(p, src.Size-1000); err != nil {
			t.Fatal(err)
		}
		_, err := VerifyStub(ctx, p, owned)
		if !errors.Is(err, ErrStub) || !strings.Contains(err.Error(), "past the end of the file") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("other source", func(t *testing.T) {
		other := openT(t, "stories260K-Q8_0.gguf")
		d, err := other.HeaderDigest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = VerifyStub(ctx, dst, owned, WithSourceHeaderDigest(d))
		if !errors.Is(err, ErrStub) || !strings.Contains(err.Error(), "differs from the source's") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("owned name missing", func(t *testing.T) {
		o := NewNameSet(append(owned.Sorted(), "blk.9.attn_q.weight")...)
		_, err := VerifyStub(ctx, dst, o)
		if !errors.Is(err, ErrStub) || !strings.Contains(err.Error(), `"blk.9.attn_q.weight": owned by the pack but not a tensor`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bad options", func(t *testing.T) {
		if _, err := VerifyStub(ctx, dst, owned, WithSourceHeaderDigest([32]byte{})); err == nil {
			t.Error("zero digest accepted")
		}
		if _, err := VerifyStub(ctx, dst, owned, WithAllowZero("")); err == nil {
			t.Error("empty allow name accepted")
		}
	})
}

// A stub command killed before its rename leaves its temp file (most of the source's bytes) beside
// dst; the next EmitStub for dst removes it, and its own temp file is gone once it has committed.
func TestEmitStubRemovesDeadTemp(t *testing.T) {
	src := openT(t, "stories260K.gguf")
	owned, err := MatchTensors(src, matmulRE)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	dst := filepath.Join(dir, "stub.gguf")
	dead := filepath.Join(dir, ".stub.gguf.00000000000000aa.tmp") // unlocked: its writer was killed
	if err := os.WriteFile(dead, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := EmitStub(context.Background(), src, owned, dst); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "stub.gguf" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("%s holds %v, want only stub.gguf", dir, names)
	}
}
