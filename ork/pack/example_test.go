package pack_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/zeebo/blake3"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
)

// Write a one-weight pack planned for the rk3588, then load the weight back through the untiler.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "orkpack-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.orkpack")

	const k, n = 64, 32
	codes := make([]int8, k*n) // int4 codes [N][K] from the quantizer
	for i := range codes {
		codes[i] = int8(i%16 - 8)
	}
	scales := make([]float32, n) // per channel: [N][1]
	for i := range scales {
		scales[i] = 0.01
	}
	w, err := pack.Create(ctx, path, board.Planner(board.RK3588()))
	if err != nil {
		panic(err)
	}
	defer w.Close()
	meta := pack.Meta{Name: "blk.0.attn_q.weight", DType: pack.I4Native, K: k, N: n, QErr: 0.05, Source: blake3.Sum256([]byte("source tensor bytes"))}
	if err := w.Add(ctx, pack.Weight{Meta: meta, Codes: codes, Scales: scales}); err != nil {
		panic(err)
	}
	if err := w.Commit(ctx); err != nil {
		panic(err)
	}

	r, err := pack.Open(ctx, path) // validates header, footer and index
	if err != nil {
		panic(err)
	}
	defer r.Close()
	e, _ := r.Entry("blk.0.attn_q.weight")
	got, err := r.Load(ctx, e.Name) // verifies the entry's BLAKE3, then untiles
	if err != nil {
		panic(err)
	}
	fmt.Println(e.DType, e.K, e.N, e.Np, e.Length, e.ResidentBytes, e.Domain, r.Board().Name)
	fmt.Println(got.Codes[:4], got.Scales[0], r.VerifyAll(ctx))
	// Output:
	// I4_NATIVE 64 32 64 8192 4096 0 rk3588
	// [-8 -7 -6 -5] 0.01 <nil>
}
