// Package registry moves orkpipe build outputs through OCI registries: push, pull, describe, and
// signed attestations attached as referrers. It is the only way packs travel between the build
// machine and the board hosts, so every transfer is verified, resumable and parallel.
//
// # Artifact layout (normative text in docs/oci.md)
//
// One OCI image manifest per build, following the CNCF ModelPack conventions:
//
//	artifactType  application/vnd.cncf.model.manifest.v1+json
//	config        application/vnd.cncf.model.config.v1+json  (descriptor, config{format: "orkpack"}, modelfs.diffIds)
//	layers        application/vnd.cncf.model.weight.v1.raw[+zstd]   pack and stub GGUF
//	              application/vnd.cncf.model.doc.v1.raw[+zstd]      report.json, provenance.json
//	annotations   org.opencontainers.image.created (from provenance, never the wall clock),
//	              dev.orkpipe.format = "1", dev.orkpipe.board-profile, dev.orkpipe.recipe.digest
//
// Each layer carries the bytes of a list of extents of one file, concatenated: a file larger than
// the part size is several layers; a sparse file (the stub) sends only its data extents, found with
// SEEK_DATA/SEEK_HOLE, and is recreated sparse on pull. Layer annotations: org.cncf.model.filepath,
// dev.orkpipe.file.{size,sha256,blake3} (the whole uncompressed file), dev.orkpipe.part ("i/n"),
// dev.orkpipe.part.extents (JSON [[offset,length],...]) and dev.orkpipe.part.sha256 (the
// uncompressed bytes; equal to the config's diffId). A layer is zstd-compressed only when a sample
// of its file compresses below 90%. Layer digests cover the stored bytes.
//
// # Guarantees
//
// Push is deterministic (same files, part size and provenance: same manifest digest) and verifies
// on write (the bytes uploaded must hash to what pass 1 computed; the manifest must parse back).
// Pull verifies each layer as it streams (stored sha256 and size, decoded sha256 and size), writes
// only into DIR/.orkpipe-partial (see PartialDir), verifies each whole file once (its size and one
// digest, see Verification) before a read-only, no-clobber rename into DIR, and resumes a killed
// pull from the parts its journal records (re-hashed from disk first). Each byte is received once
// and, in the same cache-resident block, hashed by sha256 and into the file's BLAKE3 and written:
// the whole-file BLAKE3 is merged from 4 MiB subtree pieces each verified part hashed from its own
// bytes (b3tree.go), so the file is not read back. Transient failures (5xx, truncation, dropped
// connections, corrupt bytes) are retried per part, with ranged resumption inside a part; a part that
// cannot be fetched intact fails the pull with an error naming the file, part and layer digest.
//
// The whole-file digest pull recomputes is dev.orkpipe.file.blake3. The file's sha256 annotation is
// not recomputed: every part already matched its sha256 layer digest, and a BLAKE3 match proves the
// assembled file is byte-identical (parts in their places) to the file push hashed, whose sha256 is
// the annotation push wrote in the same pass — equal by implication, not by a second sha256 pass
// (which alone would exceed the pull's 2x-cp budget on a 2-core host). A manifest from another
// tool without a BLAKE3 annotation is verified by the whole-file sha256 instead; without either,
// the per-part digests are the only check. PulledFile.Verified (and the CLI's output) says which.
//
// # Transport
//
// Credentials come from the Docker config and credential helpers (authn.DefaultKeychain). TLS is
// required unless WithPlainHTTP names the host or WithInsecure is given; credentials never appear in
// errors, logs or attestations.
package registry
