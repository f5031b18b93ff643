package model

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
)

// TestEncodedMappedFault: a MapEncoded weight is a mapping of its file (no copy), so a file truncated
// under it must give an error naming the fault when the rows are dequantized, not a crash; before the
// truncation the same weight applies without error.
func TestEncodedMappedFault(t *testing.T) {
	ctx := context.Background()
	path := mappableModel(t, "m.gguf")
	f, err := gguf.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := NewGGUFSource(f, 0)
	s.KeepEncoded, s.MapEncoded = true, true
	var ti gguf.TensorInfo
	for _, c := range f.Tensors {
		if len(c.Shape) == 2 && c.Type == gguf.TypeQ8_0 && strings.HasPrefix(c.Name, "blk.") {
			ti = c
			break
		}
	}
	if ti.Name == "" {
		t.Fatal("no Q8_0 block weight in stories260K-Q8_0.gguf")
	}
	l, _, err := s.Linear(ctx, ti.Name)
	if err != nil {
		t.Fatal(err)
	}
	n, k := l.Dims()
	y, x := make([]float32, 2*n), make([]float32, 2*k)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	if err := l.Apply(y, x); err != nil {
		t.Fatalf("intact file: %v", err)
	}
	if err := os.Truncate(path, f.DataOffset); err != nil {
		t.Fatal(err)
	}
	err = l.Apply(y, x)
	if err == nil || !strings.Contains(err.Error(), "fault reading the weight's bytes") {
		t.Fatalf("file truncated under the weight: err %v, want a fault error", err)
	}
}

// TestEncodedMapNeedsFile: MapEncoded maps through the descriptor the model was opened with; a model
// parsed from another reader (gguf.Parse: its Path is only a name) reads its weights into memory and
// gives the same products as the mapped weights of the same bytes.
func TestEncodedMapNeedsFile(t *testing.T) {
	ctx := context.Background()
	path := testfiles.Path(t, "stories260K-Q8_0.gguf")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opened, err := gguf.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	parsed, err := gguf.Parse(ctx, bytes.NewReader(src), int64(len(src)), "no-such-dir/m.gguf")
	if err != nil {
		t.Fatal(err)
	}
	name := "blk.0.ffn_down.weight"
	var ys [2][]float32
	for i, f := range []*gguf.File{opened, parsed} {
		s := NewGGUFSource(f, 0)
		s.KeepEncoded, s.MapEncoded = true, true
		l, ok, err := s.Linear(ctx, name)
		if err != nil || !ok {
			t.Fatalf("%s of %s: ok %t, err %v", name, f.Path, ok, err)
		}
		e, isEnc := l.(*Encoded)
		if !isEnc {
			t.Fatalf("%s: %T, want *Encoded", name, l)
		}
		if want := i == 0 && canMapTensors; e.mapped != want {
			t.Errorf("%s of %s: mapped %t, want %t", name, f.Path, e.mapped, want)
		}
		n, k := l.Dims()
		x := make([]float32, k)
		for j := range x {
			x[j] = float32(j%5) - 2
		}
		ys[i] = make([]float32, n)
		if err := l.Apply(ys[i], x); err != nil {
			t.Fatal(err)
		}
	}
	for j := range ys[0] {
		if ys[0][j] != ys[1][j] {
			t.Fatalf("output %d: mapped %v, read %v", j, ys[0][j], ys[1][j])
		}
	}
}

// TestForwardReleasesMappings: Forward releases each layer after running it, so a model whose
// weights are mappings of its file (MapEncoded; a loaded layer adds mappings) holds no more mappings of
// it once Forward returns than before (the collector is off: nothing is unmapped behind Forward's
// back), and its logits are those of the same model reading its weights.
func TestForwardReleasesMappings(t *testing.T) {
	ctx := context.Background()
	path := mappableModel(t, "forward-mapped.gguf")
	mappings := func() int {
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			testfiles.Need(t, "no /proc/self/maps: %v", err)
		}
		return strings.Count(string(b), path)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	tokens := []int32{1, 403, 407, 261, 378, 426, 259, 260, 387, 300}
	var logits [2][]float32
	for i, mapped := range []bool{true, false} {
		m, _, f, err := OpenGGUF(ctx, path, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		s := m.Src.(*GGUFSource)
		s.KeepEncoded, s.MapEncoded = true, mapped
		before := mappings()
		l, err := LoadLayer(ctx, &m.Cfg, s, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n := mappings(); (n > before) != mapped {
			t.Fatalf("mapped %t: %d mappings of the model file with a layer loaded, %d before", mapped, n, before)
		}
		l.Release()
		if logits[i], err = m.Forward(ctx, tokens); err != nil {
			t.Fatal(err)
		}
		if n := mappings(); n != before {
			t.Errorf("mapped %t: %d mappings of the model file after Forward, want the %d before it", mapped, n, before)
		}
	}
	for j := range logits[0] {
		if logits[0][j] != logits[1][j] {
			t.Fatalf("logit %d: mapped %v, read %v", j, logits[0][j], logits[1][j])
		}
	}
}

// mappableModel copies stories260K-Q8_0.gguf (Q8_0 block weights: held encoded, so mappable) to a
// file named name in a temporary directory of t's and returns its path; t is skipped where files are
// not mapped.
func mappableModel(t *testing.T, name string) string {
	t.Helper()
	if !canMapTensors {
		testfiles.SkipBuild(t, "files are not mapped on this system")
	}
	src, err := os.ReadFile(testfiles.Path(t, "stories260K-Q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
