package pack_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/zeebo/blake3"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
	"orkpipe/ork/tile"
)

// quantized is a weight as the quantizer hands it over: codes [N][K] (or fp16 values) and scales [N][groups].
// A rotated weight's K is the rotated row length, as the quantizer makes it: a dtype that requires a
// rotation takes k padded to a multiple of 32, and its block (64, 128 or 256, at most the largest power of
// two dividing K) divides K; another dtype is rotated (at random) only when k is a multiple of 32.
func quantized(r *rand.Rand, name string, dt pack.DType, k, n, group int, nib tile.NibbleOrder) pack.Weight {
	if dt.RotationRequired() {
		k = (k + 31) / 32 * 32
	}
	m := pack.Meta{Name: name, DType: dt, K: k, N: n, Group: group, QErr: r.Float64()}
	if dt.Int4() {
		m.Nibbles = nib
	}
	if dt.RotationRequired() || (dt != pack.F16 && r.IntN(2) == 0) {
		// The same draws whether or not k takes the rotation, so that the weights after this one do not change.
		block, seed := 64<<r.IntN(3), r.Uint64()
		if k%32 == 0 {
			m.Rotation = pack.Rotation{Kind: pack.RotHadamard, Block: min(block, k&-k), Seed: seed}
		}
	}
	if dt != pack.F16 {
		m.ActClip = []float32{1, 0.9, 0.78125, 0.5}[r.IntN(4)]
	}
	w := pack.Weight{Meta: m}
	if dt == pack.F16 {
		w.F16 = make([]uint16, k*n)
		for i := range w.F16 {
			w.F16[i] = uint16(r.Uint32())
		}
	} else {
		w.Codes = make([]int8, k*n)
		for i := range w.Codes {
			if dt.Int4() {
				w.Codes[i] = int8(r.IntN(16) - 8)
			} else {
				w.Codes[i] = int8(r.IntN(255) - 127)
			}
		}
		w.Scales = make([]float32, n*m.Groups())
		for i := range w.Scales {
			w.Scales[i] = float32(r.Float32()*0.01) + 1e-4 // rounded before the sum: no fused multiply-add on arm64
		}
	}
	src := fmt.Appendf(nil, "%s/%d/%d", name, k, n)
	for _, c := range w.Codes {
		src = append(src, byte(c))
	}
	w.Source = blake3.Sum256(src)
	return w
}

// writePack writes the weights in order with the rk3588 planner and returns the path.
func writePack(t testing.TB, dir string, ws []pack.Weight, opts ...pack.Option) string {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("p%d.orkpack", rand.Int()))
	w, err := pack.Create(context.Background(), path, board.Planner(board.RK3588()), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	for _, wt := range ws {
		if err := w.Add(ctx, wt); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return path
}

func sameWeight(t *testing.T, want, got pack.Weight) {
	t.Helper()
	wantClip := want.ActClip
	if wantClip == 0 {
		wantClip = 1 // Meta.Validate's default
	}
	if got.Name != want.Name || got.DType != want.DType || got.K != want.K || got.N != want.N || got.Group != want.Group ||
		got.Nibbles != want.Nibbles || got.Rotation != want.Rotation || got.QErr != want.QErr || got.Source != want.Source ||
		got.ActClip != wantClip {
		t.Fatalf("%s: meta differs:\n got %+v\nwant %+v", want.Name, got.Meta, want.Meta)
	}
	if !equal(got.Codes, want.Codes) || !equal(got.F16, want.F16) || !equal(got.Scales, want.Scales) {
		t.Fatalf("%s (%s K=%d N=%d G=%d): codes, fp16 values or scales differ after the round trip", want.Name, want.DType, want.K, want.N, want.Group)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func nan() float64 { return math.NaN() }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
