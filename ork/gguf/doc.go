// Package gguf reads, writes, dequantizes and stubs GGUF files as llama.cpp does.
//
// # On-disk format (little-endian, GGUF v3; v2 has the same layout and is accepted)
//
//	magic      4 bytes  "GGUF"
//	version    u32      3 (2 accepted; 0, 1, >3 and the byte-swapped big-endian form rejected)
//	n_tensors  u64
//	n_kv       u64
//	kv[n_kv]   key: string, type: u32, value
//	tensor_info[n_tensors]
//	           name: string (< 64 bytes), n_dims: u32 (<= 4), ne[n_dims]: u64,
//	           type: u32 (ggml type id), offset: u64 (relative to the data section)
//	padding    zeros up to a multiple of the alignment
//	data       tensor i at data + offset_i; offset_i is the running sum of
//	           PAD(nbytes_j, alignment) over j < i (no gaps, no reordering, no overlap)
//
// A string is a u64 byte count followed by the bytes (no terminator). A KV value is one of
// u8, i8, u16, i16, u32, i32, f32, bool (one byte), string, u64, i64, f64, or an array: element
// type u32, count u64, elements (arrays of arrays are rejected). The alignment is the u32 KV
// general.alignment (a power of two), 32 when absent.
//
// # Contracts
//
// Parse validates everything llama.cpp's gguf loader validates and reports exactly what is
// wrong and where (field, key or tensor name, byte offset). No count or length read from the
// file is used to allocate: strings and arrays grow as their bytes are read, so parsing an
// n-byte input allocates O(n), and since a sparse file's hole counts as n bytes, the KV section
// is refused past MaxMetadataBytes, the tensor count past MaxTensors and the tensor-info table
// past MaxTensorInfoBytes (ErrLimit), and a too-long tensor name by its length, unread.
// Tensor data is never loaded as a whole: ReadRows and ReadRaw read by
// pread (io.ReaderAt) row range by row range.
//
// Write emits a file that Parse (and llama.cpp) accepts, streaming tensor data from a callback,
// and verifies on write: the encoded header is parsed back and every tensor's byte count is
// checked. Parsing a file and writing it back reproduces it byte for byte.
//
// A stub (EmitStub) is a copy of a source file whose header, KV and tensor infos are byte-
// identical, whose non-owned tensor data is copied, and whose owned tensor data is left as file
// holes, at the source's full length. VerifyStub checks one against an owned set.
//
// Weight orientation: a matmul weight has ne[0] = K (row length, input features) and
// ne[1] = N (rows, output channels); row n is N's index, and rows are dequantized one by one.
package gguf
