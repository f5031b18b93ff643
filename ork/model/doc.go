// Package model implements what orkpipe needs to run a llama-family language model on the CPU without
// an NPU board: the tokenizers llama.cpp builds from GGUF metadata (tokenizer.ggml.*), a float32 forward
// pass for the llama family (llama, mistral, qwen2, qwen3), and offline evaluation (perplexity and KL
// divergence computed exactly the way llama.cpp's llama-perplexity computes them).
//
// # Tokenizers
//
// [NewTokenizer] builds a [Tokenizer] from a [Vocab] of plain values (token strings, scores, token types,
// merges, special ids, flags), so the tokenizer does not depend on how the values were read;
// [VocabFromGGUF] reads them with llama.cpp's defaults. The tokenizers match llama.cpp's llama-vocab.cpp
// at the reference commit (../shared/testdata/SOURCES.md; testdata/pretok/golden.json.gz records it) token
// for token:
//
//   - model "llama": SentencePiece-style. The text gets a leading space (add_space_prefix, default true),
//     every space becomes U+2581, the text is split into UTF-8 characters and adjacent symbols are merged
//     greedily by the score of the merged token (ties: leftmost); a symbol that is not a token is emitted
//     as byte tokens <0xNN>.
//   - models "gpt2", "gemma4", "whitespace": BPE. The text is split by the pre-tokenizer named by
//     tokenizer.ggml.pre (every name llama.cpp accepts, 57 pre-tokenizer types; pretok.go), each piece is
//     mapped byte by byte to GPT-2's printable code points (not for the SPM-style gemma4/sarvam-moe and
//     whitespace types) and merged by merge rank (lowest first, ties leftmost).
//   - model "bert": WordPiece. BERT normalization (lower case and accents stripped unless the normalizer
//     keys say otherwise; punctuation and CJK ideographs are words of their own), then the longest tokens
//     matching "▁"+word, left to right.
//
// Models t5 (Unigram), rwkv, plamo2 and hybriddna are refused with [ErrUnsupported].
//
// Pre-tokenizers are llama.cpp's regular expressions, written as scanners: where llama.cpp has a hand-
// written one (gpt2, llama3, qwen2, qwen35, kimi-k2, digit groups, newlines) the same code; the others,
// which llama.cpp runs through std::regex, as item sequences (runs of a character class, literal
// alternations, lookahead) matched with ECMAScript's backtracking over the keys llama.cpp gives the regex
// engine — a code point's category byte for patterns with \p{..}, so \p{Lu} is any letter there. Code
// point categories are llama.cpp's (Unicode 15.1: Go's tables plus the 15.1 additions), and so are its
// lenient UTF-8 decoding, its \s (White_Space) and its NFD (first code point only). testdata/pretok holds
// llama.cpp's own splits of 379 inputs for every type, and its vocab test vectors run with
// ORKPIPE_LLAMA_MODELS set.
//
// User-defined tokens are always split out of the text before tokenization; control tokens only when
// special-token parsing is asked for. As in llama.cpp, tokens whose text marks them end-of-generation
// ("<|endoftext|>", "<|im_end|>", ...) or fill-in-the-middle count as control tokens, and some models
// strip whitespace next to special tokens (Phi-3).
//
// # Forward pass
//
// [Model] runs a batch of tokens through the network in float32. Every block is two residual halves,
// h += mixer(rms(h)·attn_norm) and h += FFN(rms(h)·ffn_norm), and [Config.Kind] says which mixer and
// FFN block l has; each architecture's file (arch_llama.go, arch_qwen35.go, arch_lfm2.go, in the
// manner of llama.cpp's src/models/<arch>.cpp) reads its keys and composes these shared blocks:
//
//   - attention: RMSNorm, RoPE (normal = interleaved pairs for arch llama, whose Q/K the GGUF
//     converter permutes; neox = split halves for the others; qwen35's IMROPE sections), optional
//     per-head q/k norms, grouped-query causal attention;
//   - gated attention (qwen35): attn_q yields a query and a gate per head, the output is gated by
//     sigmoid(gate);
//   - Gated DeltaNet (qwen35): fused q|k|v projection, causal depthwise convolution with SiLU, L2-normed
//     q/k, the per-head gated delta rule with key heads broadcast to value heads, a gated RMS norm;
//   - short convolution (LFM2): B⊙x convolved causally, gated by C;
//   - SwiGLU FFN, and mixture-of-experts FFNs (softmax or sigmoid routing, selection bias, top-k
//     renormalized, qwen35moe's gated shared expert).
//
// [Config.Sites] describes the distinct linear inputs of each block (what calibration captures);
// [Model.RunLayerBatch] runs S sequences of equal length at once, every matmul weight applied once to
// all rows, attention, convolutions and recurrences per sequence with positions and state restarting.
// Every matrix product goes through the [Linear] interface (y = W·x with W of N rows by K values, GGUF
// ne[0] = K, ne[1] = N), so the same pass runs float weights read from a GGUF file and, for evaluation,
// the board's emulated integer arithmetic. Weights come from a [WeightSource]; layers are loaded one at
// a time, so a model bigger than memory can be run layer by layer ([LoadLayer] / [Model.RunLayer]).
// A [GGUFSource] with KeepEncoded keeps quantized and 16-bit weights in their file encoding ([Encoded]:
// row blocks dequantized per Apply into bounded scratch), with results bit-identical to float32 weights (pure-Go build; -tags blas: to float32 rounding);
// [Config.WeightBytes] and [Config.BlockScratchBytes] state what such a source holds.
//
// Mixture-of-experts models (llama.cpp's llama arch with <arch>.expert_count > 0, e.g. Mixtral) have in
// every block a router ffn_gate_inp and three expert tensors ffn_{gate,up,down}_exps of n_expert slices.
// The FFN of such a block is llama.cpp's llm_build_moe_ffn for arch llama: p = softmax(router·x), the
// expert_used_count experts of largest p (ties: lower expert index first, so routing is deterministic),
// their p renormalized to sum 1 (the sum floored at 2^-14), and the sum over the selected experts, in
// selection order, of p_e · down_e(silu(gate_e·x) · up_e·x) ([Route]). Expert slice e of an expert tensor is
// the Linear named "<tensor>#<e>" — the name of its orkpack entry — so a pack's expert entries replace
// the float slices one by one like any other weight. [ExpertObserver] sees the rows routed to each expert.
//
// # Evaluation
//
// [Perplexity] follows llama-perplexity: the whole text is tokenized once with BOS, split into
// n_chunk = tokens / ctx chunks of ctx tokens, the first token of every chunk replaced by BOS, and the
// negative log-likelihood of the second half of each chunk summed. The reported error is llama.cpp's
// (standard error of the mean NLL, propagated through exp). With a base model, the KL divergence of the
// base distribution to the evaluated one per scored token, and the rate of agreeing top tokens, are
// reported as llama-perplexity's --kl-divergence mode does. The chunks run a group at a time
// ([EvalGroupChunks]: 256 MiB of hidden states): each block is loaded once for the group and run on
// its chunks one after another, an MoE block's routed experts on all of the group's tokens at once
// where their products give each token the same bits (the pure-Go build's sliced products, the emulated
// pack entries), so every chunk scores what it scores alone. With [GGUFSource.GGMLActivations] the inputs of
// Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/F16/BF16 matrices are rounded as ggml's CPU backend rounds them (Q8_0 blocks,
// binary16, bfloat16), which is what makes quantized GGUF files score as llama.cpp scores them.
// [Model.KVF16] rounds attention keys and values to binary16 as llama.cpp's default F16 K/V cache does.
//
// # ggml-exact pass
//
// With [Model.GGMLExact] and a [GGUFSource] with GGMLExact, every operation is computed as ggml's CPU
// backend computes it in llama-perplexity's default run (the AVX2 + FMA + F16C build of the reference
// llama.cpp), rounding for rounding: matrix products read the input as ggml converts it (Q8_0 blocks by the
// AVX2 quantizer, binary16) and sum in the lane order of llamafile's sgemm or ggml_vec_dot_* (ggmldot.go,
// ggmlmatmul.go); flash attention over the F16 K/V cache takes the tiled kernel for ubatches of 64 rows or
// more and the binary16-accumulating one below (ggmlattn.go), with llama-perplexity's batching of chunks
// into ubatches ([Model.GGMLUbatch], set by [Evaluate]); RMS norm, SiLU (ggml_v_expf), RoPE, the short
// and causal convolutions, the Gated DeltaNet recurrence and the MoE softmax follow ggml's kernels as the
// compiler built them (where GCC fused or vectorized a plain C loop, so does the emulation). A quantized
// model's perplexity then equals llama.cpp's: with random weights and Q8_0 activations, a single
// different rounding early in a chunk changes codes downstream and moves the figure by about 0.1%, so an
// approximate pass cannot get closer than that. What stays approximate is the C library: expf, logf and
// sincosf are the correctly rounded values, which differ from glibc's in the last bit for 0.1-1.5% of
// arguments; float32 models show it as differences of about 2e-6 in perplexity.
//
// [EvaluateKLBase] takes the base distribution from a file llama-perplexity --kl-divergence-base wrote
// ([KLBase]; its format is documented in klbase.go) and computes the statistics llama-perplexity
// --kl-divergence prints ([KLReport]).
//
// For a pack, [PackSource] replaces each matmul weight the pack holds by an [Emulated] Linear: the board's
// arithmetic (rotation, per-token int4/int8 activations, int32 dot products per scale group, scales).
package model
