package gguf

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"orkpipe/internal/testfiles"
)

// TestParseAllocation bounds what parsing allocates relative to the header it reads: the
// header is held in memory (KV values, tensor infos), tensor data never is.
func TestParseAllocation(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(testfiles.Dir(t), "*.gguf"))
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f, err := Parse(context.Background(), bytes.NewReader(data), int64(len(data)), p)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: header %d bytes of %d, parse allocated %d bytes (%.2f x header)", filepath.Base(p), f.DataOffset, len(data), alloc, float64(alloc)/float64(f.DataOffset))
		if alloc > 4*uint64(f.DataOffset)+256<<10 {
			t.Errorf("%s: parsing a %d-byte header allocated %d bytes", p, f.DataOffset, alloc)
		}
	}
}
