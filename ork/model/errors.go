package model

import "errors"

// Sentinel errors. Errors returned by this package wrap one of these where the condition is one a caller
// may want to test for; the message always names the file, tensor, key or token involved.
var (
	// ErrUnsupported is returned for an architecture, tokenizer model or pre-tokenizer this package does
	// not implement.
	ErrUnsupported = errors.New("unsupported")
	// ErrBadVocab is returned when tokenizer metadata is inconsistent (lengths differ, ids out of range, a
	// byte token missing).
	ErrBadVocab = errors.New("bad vocabulary")
	// ErrBadText is returned for text a tokenizer cannot take (llama.cpp fails on it as well).
	ErrBadText = errors.New("text the tokenizer cannot take")
	// ErrSplitModel is returned for one shard of a model split across files (llama-gguf-split): the
	// model is read from one file, so the shards must be merged first.
	ErrSplitModel = errors.New("a shard of a split model")
	// ErrDraftModel is returned for a file that holds only a model's multi-token-prediction block, the
	// speculative draft convert_hf_to_gguf.py --mtp writes beside the model (llama.cpp loads it as
	// mtp_only): it has no trunk to run or pack.
	ErrDraftModel = errors.New("a multi-token-prediction draft without the model's trunk")
	// ErrBadModel is returned when model metadata or tensor shapes are inconsistent.
	ErrBadModel = errors.New("bad model")
	// ErrTooShort is returned when a text is too short to form a single evaluation chunk.
	ErrTooShort = errors.New("text too short")
	// ErrBadKLBase is returned for a KL-divergence base file (llama-perplexity --kl-divergence-base)
	// that is malformed or does not match the model and text it is used with.
	ErrBadKLBase = errors.New("bad KL-divergence base file")
	// ErrOverBudget is returned when emulating a pack entry would need more memory than the caller's
	// budget (PackSource.CheckEmulationMemory).
	ErrOverBudget = errors.New("over the memory budget")
	// ErrNotFinite is returned when a forward pass makes a NaN or an infinity (finite.go): the message
	// names where, and the first weight that holds one when a weight does.
	ErrNotFinite = errors.New("not a finite number")
)
