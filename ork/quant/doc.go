// Package quant holds orkpipe's quantization numerics: symmetric int4/int8 weight quantizers
// (per output channel or per group along K) with a clip search, per-token activation
// quantization and the integer matmul the RK3588 NPU performs, normalised Hadamard rotations,
// GPTQ, ggml's reference quantizers (Q8_0, Q4_0 bit-exact; Q4_K) for comparison, and the error
// metrics that rank them.
//
// # Conventions
//
// A matmul weight W has N rows (output channels) of K values (input features); GGUF ne[0]=K,
// ne[1]=N; y = W·x. A float weight is a [Matrix] (float32, row-major [N][K]).
//
// A quantized weight is a [Weight]:
//
//   - Codes are int8, row-major [N][KP]. KP is the stored row length: K itself, or, when a
//     [Rotation] zero-pads K (see below), the padded length. int4 codes lie in [-8, 7] (the
//     full two's-complement range the NPU's int4 MAC takes), int8 codes in [-127, 127].
//   - Quantization is symmetric: value = code · scale. A group's scale is
//     s = shrink · amax / qmax with qmax = 7 (int4) or 127 (int8), where amax is the largest
//     magnitude in the group and shrink is chosen by the clip search (1 means no clipping).
//     Unclipped values never need code -8 with a positive scale; it is used only by clipped
//     negative values, so it can only lower the error against clamping to [-7, 7]. With
//     [WithNegativeScales] the search also tries -shrink (a negative scale, int4 only): the
//     group's largest positive value then takes code -8, so the 16th code serves whichever sign
//     the extreme value has (llama.cpp's Q4_0 takes d = max/-8 for the same reason).
//   - The clip search scores each candidate scale by the group's squared error weighted by
//     diag(H) (or an importance; unweighted without either), or, in GPTQ with
//     [WithScaleSearch](ScaleSearchGPTQ), by GPTQ's own loss over the group (the group's columns
//     quantized in order with their errors fed forward through the factor of H⁻¹), which sees
//     the Hessian's off-diagonal terms inside the group.
//   - Scales are float32, row-major [N][ceil(KP/G)] for group size G, or [N][1] for per-channel
//     quantization (G = 0). A last partial group (e.g. K = 172 with G = 32: five groups of 32
//     and one of 12) gets its own scale.
//   - An all-zero group has scale 0 and codes 0.
//   - Rounding is round-half-away-from-zero of x·(1/s), clamped to the code range — one rule
//     for RTN, GPTQ and activations: in float64 (quantCode), except RTN's clip search and codes,
//     which run in float32 on the float32 weights (x·inv with inv = 1/s in float32, quantCode32;
//     the arithmetic is in rtn32.go), for groups whose amax lies in [2^-40, 2^40].
//
// # Rotation
//
// A [Rotation] R = B·D is orthogonal: D is a diagonal of ±1 signs drawn from a seed (or all +1),
// B is block-diagonal with normalised Walsh-Hadamard blocks of size Block, the largest power of
// two dividing the padded length P, and Block >= 32. P is K when K has a power-of-two divisor of
// at least 32 (64 -> one 64 block; 5120 -> 5 x 1024; 17408 -> 17 x 1024; 4096 -> one 4096
// block); otherwise K is zero-padded up to the next multiple of 32 (172 -> 192 = 3 x 64) — the
// NPU pads K to a multiple of 32 anyway. [NewRotationMinBlock] (option WithRotationMinBlock) pads
// further when the blocks would be shorter than a minimum (172 with 256: one block of 256), so
// each rotated value mixes more channels. Weights rows and activation rows are rotated the same
// way: (R·w)·(R·x) = w·x, so a rotated weight is only correct against rotated activations, and
// both carry the padded length KP = P. Every consumer (tiler, pack, evaluator) must pad an
// activation row of K values with P-K zeros before rotating it, which [Rotation.Apply] does.
//
// # Activations and the integer matmul
//
// Activations are quantized per token (row), symmetric, with the same code ranges and
// s = clip · amax / qmax ([QuantizeActivations]). [MatMulInt] computes y = W·x exactly as the
// board does: for each weight group an int32 dot product of codes, scaled by the weight group's
// scale and summed in float32 in group order, then multiplied by the token's activation scale.
//
// # GPTQ
//
// [GPTQ] follows IST-DASLab's reference gptq.py (fasterquant): dead columns, damping of
// percdamp·mean(diag H) (retried with more damping when a Cholesky factorisation fails), the
// upper Cholesky factor of H⁻¹, per-column error propagation, lazy batch updates in blocks of
// 128, group scales chosen at each group start from the current (already updated) weights,
// optional act-order and static groups. One documented difference: the reference computes a
// group's scale from the weight matrix W, whose columns inside the current block are stale
// (their updates live in a copy); here the group scale sees the updated values, which is what
// the algorithm intends; when a dynamic group starts inside a block and reaches past it, the
// block's pending lazy update is applied first so the group sees fully updated weights (block
// size therefore never changes the result beyond rounding). Act-order is available per channel
// or with static groups only: a Weight's groups are contiguous in K, and act-order with dynamic
// groups would need a per-column group index. Rows are independent given H⁻¹ and run in
// parallel chunks (WithWorkers); gonum's BLAS may add its own goroutines inside a chunk. Where
// nothing reads U beyond its diagonal blocks (all but the scale refit, the asymmetric input target
// and dynamic groups that do not tile the block), the row phase runs on M = U⁻¹, the Cholesky factor
// of H itself, and the inverses of its diagonal blocks instead (gptq_direct.go): the same
// quantization up to rounding, without the triangular inverse.
// Its result carries QErr, the diag(H)-weighted relative error
// sqrt(Σ H_kk (W-Q)²_nk / Σ H_kk W²_nk) of the final weights (in the rotated space when rotated).
// With [WithRotationSearch](n) a signed rotation's seed is chosen first among [SearchSeed](seed, i),
// i < n: the one whose RTN weights have the least [HessianError] tr((W-Q)·H·(W-Q)ᵀ) (the signs decide
// how the rotation spreads each row over its groups, and the error they leave varies); GPTQ then
// runs once with it. A trial's clip weights, the rotated diag(H), come from H's diagonal Hadamard
// blocks, and its error from float32 panels of the lower half of EᵀE (N·K² flops, [SearchVersion] 3).
// With [WithQuantizedInputs] GPTQ sees the inputs as the board quantizes them (a sample of them,
// rotated, clipped and quantized per token): the Hessian becomes that of the quantized inputs,
// H̃ = X̃ᵀX̃ ([InputsQuantized]), and optionally the target becomes the
// minimizer of ‖W·X − Q·X̃‖ ([InputsAsymmetric]), W* = W − (H̃⁻¹·X̃ᵀ(X̃−X)·Wᵀ)ᵀ, computed through
// the factor U of H̃⁻¹ that GPTQ builds anyway. With [WithScaleRefit](rounds, steps) each row's group
// scales are refitted after GPTQ, codes fixed, to the least (w−q)ᵀ·H·(w−q): a least-squares problem
// in one unknown per group, solved by preconditioned conjugate gradients on each row's Gram matrix
// AᵀHA (formed from H, which the factorisation leaves below U's diagonal), the residual's terms
// from the target's product with H, taken once for all rounds ([RefitVersion] 4); more rounds let
// GPTQ choose codes again with the refitted scales fixed, each row keeping its better round.
//
// Hessians ([Hessian]) are float64 K x K, Σ x·xᵀ over Tokens activation rows (unnormalised:
// GPTQ is invariant to their scale).
//
// # BLAS
//
// Linear algebra goes through gonum (blas64, gonum's LAPACK). GPTQ's factorisation (one Cholesky of H
// reflected across its anti-diagonal, K³/3 flops, which gives the direct row phase its M = U⁻¹,
// plus K²·128 flops of block products; for the classic row phase one triangular inverse more, the
// upper Cholesky factor U of H⁻¹ in 2/3·K³) runs in place in one KP x KP buffer (peak memory:
// [GPTQMemory]): in the pure-Go build as gonum's blocked dpotrf/dtrtri, re-implemented block by block in cholesky.go
// so that ctx is checked between blocks (the Cholesky's blocks taking their update from the rows
// above four at a time: gonum's bits, a quarter of the reads), and gonum's dpocon with its triangular solves reading the
// factor by rows (pocon.go: gonum's estimate bit for bit, several times faster). The pure-Go build's blas64 is gonum's with
// ork/internal/dgemm's Dgemm, Dtrmm and Dsyrk (noblas.go installs it): gonum's bits, on AVX-512 and
// AVX2 kernels — GPTQ's block updates and the factorisations' panels several times faster. Built
// with -tags blas (cgo; Debian's libopenblas-dev installed), blas.go routes every gonum BLAS call
// to OpenBLAS via gonum.org/v1/netlib and runs the factorisations as OpenBLAS's own
// dpotrf/dpocon/dtrtri (ctx checked between them); results equal the pure-Go build's to float
// tolerance (TestBLASMatchesPureGo compares with a golden file the pure-Go build records: go test
// -run BLASMatchesPureGo ./ork/quant -args -update). OpenBLAS picks its kernels by CPU model when
// it loads; on a model it does not know it falls back to generic SSE3 kernels at a fifth of the
// speed — [OpenBLASCoreAdvice] detects that and internal/blascore re-executes the binary with
// OPENBLAS_CORETYPE set.
//
// # Error evaluation
//
// [EvaluateTensor] and [EvaluateAll] (behind `orkpipe qerr`) score every scheme in [Schemes] on
// a weight: the relative Frobenius weight error and the relative matmul error against a float64
// reference on an activation set the caller supplies ([SpikedActivations]: Gaussian with 1% of
// the channels x10; [CorrelatedActivations]; or real activations from ork/calib through an
// [ActivationSource]). [SyntheticWeight] makes LLM-like wide weights (e.g. K = 5120).
//
// # ggml reference quantizers
//
// [QuantizeQ8_0] and [QuantizeQ4_0] are bit-exact ports of llama.cpp's quantize_row_q8_0_ref and
// quantize_row_q4_0_ref (float32 arithmetic, scale rounded to fp16 round-to-nearest-even, the
// codes computed with the unrounded float32 scale). [QuantizeQ4K] ports quantize_row_q4_K_ref
// and make_qkx2_quants statement by statement in float32; see its doc for the known difference.
// They write the GGUF block layout (little-endian), so their output compares byte for byte with
// a GGUF tensor's data.
package quant
