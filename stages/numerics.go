package stages

import (
	"context"
	"fmt"
	"sync"

	"orkpipe/artifacts"
	"orkpipe/ork/quant"
)

// Numerics identifies the arithmetic of this binary's float code when its results depend on more
// than the stage code: "" for the pure-Go amd64 build at GOAMD64 v1 or v2 (the default), whose
// kernels give the same bits on every CPU (AVX-512, AVX2 or none, any core count; checked with
// `build --check`, docs/cli.md); "openblas <kernel set> <BLAKE3 of the loaded library> threads <n>"
// for a -tags blas build, whose results change with the OpenBLAS build, with the kernel set it picks
// for the CPU (OPENBLAS_CORETYPE) and, for GPTQ's factorisations, with its thread count
// (OPENBLAS_NUM_THREADS, else one per CPU; quant.BLASThreads): the summation orders differ. Where
// the Go compiler itself computes otherwise — it fuses x*y + z into one rounding at GOAMD64=v3 and
// above, and off amd64 — goArith is added ("go amd64.v3 (fused multiply-add)", "go arm64"): such a
// binary's compiled float code gives other bits on the same inputs. It is key material of every node
// (KeyMaterial.Numerics), so a cache shared by these builds, or by blas builds on different CPUs,
// never serves one's outputs to another under the same key; Execute refuses key material of other
// numerics than its own.
func Numerics() (string, error) { return numerics() }

var numerics = sync.OnceValues(func() (string, error) { return NumericsVia(context.Background(), artifacts.HashPath) })

// NumericsVia returns what Numerics returns, with the BLAS library hashed by hash: a caller that
// checks the numerics on every run (the build memo) passes its store's stat cache.
func NumericsVia(ctx context.Context, hash func(context.Context, string) (artifacts.Object, error)) (string, error) {
	lib, err := quant.BLASLibrary()
	if err != nil {
		return "", err
	}
	if lib == "" {
		return goArith, nil
	}
	obj, err := hash(ctx, lib)
	if err != nil {
		return "", fmt.Errorf("numerics: hashing the BLAS library %s: %w", lib, err)
	}
	n := fmt.Sprintf("%s %s %s threads %d", quant.BLASBackend, quant.OpenBLASCore(), obj.Digest, quant.BLASThreads())
	if goArith != "" {
		n += ", " + goArith
	}
	return n, nil
}
