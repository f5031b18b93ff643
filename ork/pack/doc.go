// Package pack reads and writes orkpacks: quantized matmul weights laid out for the RK3588 NPU (see ork/tile),
// an index that routes each weight and places it in an IOMMU domain, and the hashes that refuse a truncated,
// corrupted or mismatched pack before it is used.
//
// The byte-level format is specified in docs/orkpack.md (version 3; its section 1.3 lists the versions and what
// each added, and one reader reads them all). In short:
//
//	[0, 4096)                header: magic "ORKPACK\0", version, page size, total length, index offset/length,
//	                         index BLAKE3, entry count, BLAKE3 of the header fields; zero to the page
//	[4096, index_offset)     entry data, page aligned, in index order: tiled codes (page-padded per K segment)
//	                         then float32 scales [N][groups], zero-padded to the page; one BLAKE3 per entry
//	[index_offset, +len)     index: board name, profile digest, plan; one record per entry (dtype, shape, rotation,
//	                         activation bits and clip, location, plan, qerr, BLAKE3 of the data and of the source);
//	                         an MoE pack's residency section (hot experts, streaming order: Residency)
//	last 104 bytes           footer: index offset/length/BLAKE3, total length, version, entry count, checksum,
//	                         magic "ORKPEND\0"
//
// Writing streams: the writer reserves the header page, appends one entry at a time (memory bounded by one
// entry), and at Commit asks its Planner (ork/board) for resident bytes and domains, writes index, footer and
// header, fsyncs and renames. Import direction: ork/board imports ork/pack (it reads Entry); ork/pack knows the
// plan only through the Planner interface, so there is no cycle.
//
// Reading validates header, footer, index digest and every index record on Open; an entry's BLAKE3 is checked
// whenever its bytes are read; VerifyAll streams every entry through a bounded buffer and checks it as decoding
// would. Supported is the one version predicate.
//
// Entry names are source tensor names; an MoE expert slice is "<tensor>#<e>" (ExpertName, SplitExpert).
// OwnedTensors is the one definition of which source tensors a pack owns (the stub leaves exactly those as
// holes; an expert entry owns its whole tensor), and DType's methods (Bits, Int4, RotationRequired, ...)
// are the one dtype table: callers parse dtype names with ParseDType rather than listing them.
package pack
