//go:build amd64 && amd64.v3

package stages

// goArith: at GOAMD64=v3 and above the compiler fuses x*y + z into one FMA instruction (one rounding)
// wherever it sees the pattern, so the compiled Go float code (norms, RoPE, quantizers, GPTQ's
// updates) gives other bits than the default build's, on the same node keys unless named here.
const goArith = "go amd64.v3 (fused multiply-add)"
