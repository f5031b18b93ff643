package gguf

import "errors"

// Sentinel errors. Every error returned by this package that concerns one of these conditions
// wraps the sentinel (test with errors.Is); the message adds the file, field, key or tensor.
var (
	// ErrFormat: the bytes are not a GGUF file llama.cpp would accept (malformed header,
	// KV, tensor info, offsets or data bounds).
	ErrFormat = errors.New("invalid GGUF")
	// ErrLimit: the header passes a limit of this reader that no real GGUF reaches
	// (MaxMetadataBytes, MaxTensors, MaxTensorInfoBytes); the file may be valid for llama.cpp but
	// is refused unread.
	ErrLimit = errors.New("GGUF header exceeds a reader limit")
	// ErrVersion: the GGUF version is not 2 or 3 (or the file is byte-swapped).
	ErrVersion = errors.New("unsupported GGUF version")
	// ErrUnsupportedType: an operation (dequantize, quantize) is not implemented for a ggml type.
	ErrUnsupportedType = errors.New("unsupported tensor type")
	// ErrKeyNotFound: a metadata key is absent.
	ErrKeyNotFound = errors.New("key not found")
	// ErrTensorNotFound: a tensor name is absent.
	ErrTensorNotFound = errors.New("tensor not found")
	// ErrValueType: a metadata value has another type than the accessor needs.
	ErrValueType = errors.New("wrong value type")
	// ErrStub: a stub failed verification.
	ErrStub = errors.New("stub verification failed")
	// ErrWrite: a caller handed Write an inconsistent header or tensor data.
	ErrWrite = errors.New("invalid GGUF write")
)
