package stages

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"orkpipe/artifacts"
	"orkpipe/ork/board"
	"orkpipe/ork/pack"
)

// TestPrepareMappedFault: a tiled entry truncated under write-orkpack's mapping gives an error naming
// the fault, not a crash; the same mapping intact prepares.
func TestPrepareMappedFault(t *testing.T) {
	dir := t.TempDir()
	const n, k = 64, 4096 // codes span several pages, so the truncation leaves faulting pages
	q := &QWeight{Meta: QWeightMeta{Name: "blk.0.attn_q.weight", DType: "I4_NATIVE", Method: "rtn", N: n, K: k, KP: k, Bits: 4,
		Group: 32, ActBits: 4, QErr: 0.1, Source: artifacts.SumBytes([]byte("x")).String()},
		Codes: make([]int8, n*k), Scales: make([]float32, n*k/32)}
	for i := range q.Scales {
		q.Scales[i] = 1
	}
	path := filepath.Join(dir, "entry")
	if err := writeTiledEntry(context.Background(), path, q, ""); err != nil {
		t.Fatal(err)
	}
	for _, truncate := range []bool{false, true} {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		te, err := openTiledEntry(f, path, false)
		if err != nil {
			t.Fatal(err)
		}
		pm, err := te.Meta.PackMeta()
		if err != nil {
			t.Fatal(err)
		}
		pm.Nibbles = nibbleOrder(te.Nibbles)
		m, err := unix.Mmap(int(f.Fd()), 0, int(te.CodesOff+te.CodesLen), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		if truncate {
			if err := f.Truncate(te.CodesOff); err != nil {
				t.Fatal(err)
			}
		}
		w, err := pack.Create(context.Background(), filepath.Join(dir, "pack"), board.Planner(board.RK3588()))
		if err != nil {
			t.Fatal(err)
		}
		_, err = prepareMapped(w, pm, m, te)
		w.Close()
		unix.Munmap(m)
		f.Close()
		switch {
		case !truncate && err != nil:
			t.Fatalf("intact entry: %v", err)
		case truncate && (err == nil || !strings.Contains(err.Error(), "fault")):
			t.Fatalf("truncated entry: got %v, want a fault error", err)
		}
	}
}
