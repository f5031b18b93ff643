// Package calib captures the activations a model's weights see and reduces them to what quantization
// needs: per-input Hessians H = Σ x·xᵀ for GPTQ, computed layer window by layer window, bounded samples
// of the activations themselves for the activation clip search ([ActSampler], [CaptureUpperSampled]; the
// activation-sample file format is in actsample.go), and the diagonal of H from llama.cpp imatrix files for
// architectures the forward pass does not support.
//
// # Windows
//
// A calibration corpus is a fixed number of token sequences of a fixed length, cut deterministically
// from a tokenized text ([Sequences]). A window [a, b) of layers starts from the hidden states at layer a
// (the input of block a; for a = 0 the token embeddings, [EmbeddingSource]) and runs every sequence
// through blocks a..b-1 ([Capture]), accumulating one Hessian per input site of each block
// (model.Config.Sites: the weights reading the same activations share one, e.g. attn_q/attn_k/attn_v,
// ffn_gate/ffn_up; a DeltaNet block's attn_qkv/attn_gate/ssm_alpha/ssm_beta), every site but the MoE
// router's ([Captured]). It also writes the hidden states at layer b, so the next window starts there and
// never replays earlier layers; recurrent and convolution state never crosses a window boundary, since
// every window runs whole sequences from their first token.
//
// Sequences run in chunks of about [BatchRows] tokens (an MoE model's, in the pure-Go build, of four
// times that: its routed experts' products are the chunk's smallest, and with experts at least 193 rows
// wide the chunk's size changes no value; chunkSeqs): every block applies each weight once to the whole
// chunk (model.Model.RunLayerBatch), and each Hessian is updated BatchRows rows at a time in float64 with
// one rank-k update of its upper triangle (under -tags blas, OpenBLAS's dsyrk for each diagonal tile of
// 1024 and dgemm for each tile right of it, the tiles on every core; in the pure-Go build,
// ork/internal/dgemm's GramUpper: gonum's sums on its AVX-512 kernel over the batch packed once a
// pass, or on AVX2 stripes of 256 rows). Under -tags blas
// Capture and Propagate hold OpenBLAS to one thread per call (quant.SingleThreadedBLAS) and spread the
// work over Go workers themselves — the update's tiles, and model.Encoded's row panels, each dequantized
// and multiplied on one core — so that no OpenBLAS thread waits between calls. The lower triangle is
// filled once at the end ([Hessian.Symmetrize]), or never when only the file is wanted ([CaptureUpper]);
// [CaptureDeferred] also leaves each Hessian's last update to the encoder of its file ([Result.Encoder]),
// which multiplies it block by block as it encodes, so that a Hessian of one update (at most BatchRows
// tokens) never occupies its K×K float64 memory at all.
//
// In a mixture-of-experts block the FFN sites are per expert: expert e's gate/up Hessian sums x·xᵀ over
// the ffn_norm outputs of the tokens routed to e, its down Hessian over their silu(gate)·up rows
// (unweighted by the routing probability), [Result.ExpertHessian]. Per-expert rather than one shared
// Hessian over all tokens: GPTQ then minimizes each expert's error on the tokens it actually sees
// (TestExpertHessianChoice measures the difference). An expert that no calibration token reaches keeps
// an empty Hessian (Tokens = 0, [Hessian.Empty]); GPTQ cannot use it, and finalize must say so rather
// than quantize from it.
//
// One-shot mode: every window runs the float weights, and the hidden states Capture writes at b feed the
// next window. Sequential mode: the next window must see the activations the board will see, so the
// hidden states at b are produced by [Propagate] running the window with its quantized weights (a
// model.WeightSource whose Linears emulate the pack) after this window's weights were quantized; Capture
// is then called without an output.
//
// Memory is predictable before the run: [EstimateMemory] is the function the planner calls.
//
// # Hidden-states file (one per window boundary)
//
// Little-endian:
//
//	offset  size  field
//	0       8     magic "ORKHID\x00\x01"
//	8       4     u32 version (1)
//	12      4     u32 n_embd
//	16      4     u32 seq_len (tokens per sequence)
//	20      4     u32 n_seq
//	24      4     u32 layer: the states are the input of block `layer` (n_layer: after the last block)
//	28      4     u32 reserved, 0
//	32      ...   n_seq × seq_len × n_embd float32, sequence by sequence, token by token
//	end-32  32    BLAKE3-256 of every byte before it
//
// Writers check the number of values written; readers check the header, the length and the digest, and
// fail at EOF on any mismatch, so a truncated or altered file never feeds a window.
//
// # Hessian file (one per input site, or per expert of an expert site)
//
//	offset  size  field
//	0       8     magic "ORKHES\x00\x01"
//	8       4     u32 version (3)
//	12      4     u32 K
//	16      8     u64 tokens (rows accumulated)
//	24      8     reserved, 0
//	32      ...   K·(K+1)/2 float32: the upper triangle, row by row (row i: H[i][i], ..., H[i][K-1])
//	end-32  32    BLAKE3-256 of every byte before it
//
// H is accumulated in float64 and stored rounded to float32: a relative change of at most 6e-8 per
// value, far below GPTQ's damping (1% of the mean diagonal), for half the bytes written, hashed, stored
// and read (a 27B ffn_down Hessian: 606 MB instead of 2.4 GB as a full float64 matrix). The triangle is
// checked finite, with a non-negative diagonal, on write (a value beyond float32's range is an error)
// and on read; the reader returns the full symmetric float64 matrix. Versions 1 (the full float64
// matrix) and 2 (the float64 triangle) are refused: earlier calibrate stage versions wrote them, and no
// current build reads their outputs.
//
// # Routing statistics (routing.json)
//
// Capture also records, for every MoE block of the window, how the router spread the calibration tokens
// over the experts ([Result.Routing], counted through model.RouteObserver, so every MoE architecture's
// gating is counted as the block applies it); a [RouteCounter] passed to a forward pass counts any other
// text the same way (the screen stage's held-out text). The file is the JSON form of [Routing]:
//
//	{"n_expert": X, "n_expert_used": k,
//	 "layers": [{"layer": l, "tokens": T, "counts": [X lookups], "mass": [X weight sums]}, ...]}
//
// with the layers in ascending order, each at most once; every layer routes the same T tokens, and its
// counts (lookups: one per token and selected expert) sum to T·k; masses are the sums, in token order and
// in float64, of the routing weights the block gave those lookups. [ParseRouting] reads it strictly
// (unknown fields, trailing data and every broken invariant are ErrFormat); [Routing.Marshal] writes the
// canonical bytes.
//
// # imatrix files
//
// [ReadImatrix] reads llama.cpp's importance matrices into per-tensor sums of squared activations
// (diag H): the GGUF form (tensors <name>.in_sum2 [K, n_mat] and <name>.counts [1, n_mat]) and the legacy
// .dat form (int32 count; per entry: int32 name length, name, int32 ncall, int32 nval, nval float32
// values = mean(x²)·ncall; optionally a trailing int32 chunk count and the dataset name). Every reader of
// the legacy form walks it with one walker, which decides as llama.cpp's reader does: an entry repeating
// a name replaces the earlier one, the trailer is optional and an empty dataset name is none; it refuses
// what llama.cpp would read past (a trailer cut short or followed by bytes, a value that is not finite
// and >= 0 anywhere). Every reader of the GGUF form checks its tensor table with one function.
package calib
