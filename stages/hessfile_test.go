package stages

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"orkpipe/ork/calib"
)

// TestWriteHessianFile: the calibrate stage's file writer (units of pieces encoded and hashed on every
// core, written with pwrite in chunks) writes exactly the bytes of calib.WriteHessian (the streaming writer, one serial BLAKE3), for files
// of one piece, of a piece and a bit, and of many pieces with a last piece cut inside a row; the file
// reads back as the Hessian; of several bad values the error names the first; a cancelled context stops it.
func TestWriteHessianFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, k := range []int{1, 3, 64, 1447, 1448, 2900} {
		h := calib.NewHessian(k)
		h.Tokens = int64(7 * k)
		for i := range k {
			for j := i; j < k; j++ {
				h.Data[i*k+j] = math.Sin(float64(i*k+j)) * 1e3
			}
			h.Data[i*k+i] = float64(i) + 0.25
		}
		var want bytes.Buffer
		if err := calib.WriteHessian(&want, h); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, fmt.Sprintf("h%d", k))
		if err := writeHessianFile(ctx, path, h.K, plainEncoder(h)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("K=%d: the stage's file (%d bytes) differs from WriteHessian's (%d bytes)", k, len(got), want.Len())
		}
		if int64(len(got)) != calib.HessianFileSize(k) {
			t.Fatalf("K=%d: %d bytes, want %d", k, len(got), calib.HessianFileSize(k))
		}
		back, err := calib.ReadHessianFile(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if back.K != k || back.Tokens != h.Tokens || back.Data[k*k-1] != float64(float32(h.Data[k*k-1])) {
			t.Fatalf("K=%d: read back K=%d tokens=%d", k, back.K, back.Tokens)
		}
	}
	// Several bad values in a many-piece file: the error names the first in file order, whichever
	// worker found one first.
	k := 2900
	h := calib.NewHessian(k)
	h.Data[2800*k+2850] = math.Inf(1) // the last piece
	h.Data[2000*k+2500] = math.NaN()  // a middle piece
	h.Data[2000*k+2000] = -1          // the same row, earlier: the first bad value
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 3} {
		runtime.GOMAXPROCS(procs)
		err := writeHessianFile(ctx, filepath.Join(dir, fmt.Sprintf("bad%d", procs)), h.K, plainEncoder(h))
		if !errors.Is(err, calib.ErrNotFinite) || !strings.Contains(err.Error(), "(2000,2000) = -1") {
			t.Fatalf("procs %d: %v, want ErrNotFinite naming (2000,2000)", procs, err)
		}
	}
	// A cancelled context: an error, no digest.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := writeHessianFile(cctx, filepath.Join(dir, "cancelled"), 64, plainEncoder(calib.NewHessian(64))); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}
