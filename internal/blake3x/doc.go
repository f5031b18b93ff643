// Package blake3x is orkpipe's BLAKE3 kernel: standard BLAKE3-256 digests (bit for bit those of
// github.com/zeebo/blake3) computed with a 16-lane AVX-512 compression of chunks and parent nodes
// where the CPU has it (about twice zeebo's AVX2 throughput per core), and the tree arithmetic
// that lets an input be hashed in 4 MiB pieces on many cores or from separate ranges and merged.
//
// It sits below both artifacts (the store's hashes: digests, the parallel file hash, pieces) and
// ork (pack entry digests), which may not import each other; it imports nothing of the module.
// With AVX2 only, the tree uses an 8-lane AVX2 kernel (guts' without its gathers) for chunks and
// parents; off amd64, lukechampine.com/blake3/guts. Without AVX-512 the one-shot and
// streaming digests use zeebo/blake3. The assembly is checked against the portable reference
// (TestChunks16, TestParents16, FuzzWideKernels) and every digest against zeebo/blake3.
package blake3x
