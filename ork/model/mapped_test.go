package model

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
)

// TestEncodedMappedFault: a MapEncoded weight is a mapping of its file (no copy), so a file truncated
// under it must give an error naming the fault when the rows are dequantized, not a crash; before the
// truncation the same weight applies without error.
func TestEncodedMappedFault(t *testing.T) {
	if !canMapTensors {
		t.Skip("files are not mapped on this system")
	}
	ctx := context.Background()
	src, err := os.ReadFile(testfiles.Path(t, "stories260K-Q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
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
