// Package registry moves orkpipe build outputs through OCI registries: push, pull, describe, and
// signed attestations attached as referrers. It is the only way packs travel between the build
// machine and the board hosts, so every transfer is verified, resumable and parallel. The OCI
// client underneath is registry/oci; the remote build cache is registry/cacherepo.
//
// # Artifact layout (normative text in docs/oci.md; layout 2)
//
// A CNCF ModelPack model artifact, one layer per file, only ModelPack media types:
//
//	artifactType  application/vnd.cncf.model.manifest.v1+json
//	config        application/vnd.cncf.model.config.v1+json  (descriptor, config{format: "orkpack"}, modelfs.diffIds)
//	layers        application/vnd.cncf.model.{weight,doc}.v1.{raw,tar,tar+zstd}, one per file
//	annotations   dev.orkpipe.format = "2", org.opencontainers.image.created (from provenance,
//	              never the wall clock), dev.orkpipe.board-profile, dev.orkpipe.recipe.digest
//
// A file travels raw (the pack, reports), or as a tar archive (package artifacts/sparse: pax, a GNU sparse 1.0
// entry when it has holes, so the stub sends only its data) where leaving holes out pays, zstd-
// compressed where that pays (prepare.go). Each layer carries org.cncf.model.filepath and
// org.opencontainers.image.title (NAME, NAME.tar or NAME.tar.zst), so oras and ModelPack clients
// get the files back, and dev.orkpipe.file.{size,sha256,blake3,extents}. A file longer than the
// range size is cut into ranges (powers of two of 4 MiB BLAKE3 pieces, layout.go) whose BLAKE3
// chaining values (dev.orkpipe.range.blake3) merge into the file's BLAKE3; a tar form's ranges are
// separately stored segments of the archive (dev.orkpipe.range.stored), one zstd frame each.
//
// # Guarantees
//
// Push is deterministic (same file bytes and holes, range size and provenance: same manifest
// digest) and hashes a build output at most once (its digests are remembered beside the stored
// object, see WithDigests); the registry verifies every blob's sha256 on upload, and the manifest
// must parse back (verify on write). Pull fetches every file's ranges in parallel with HTTP Range
// requests on its one blob, checks each range as it streams against its chaining value (decoded,
// its archive framing compared, hashed and written in place in one pass, rangepull.go), writes
// only into DIR/.orkpipe-partial (see PartialDir), journals verified ranges so a killed pull
// resumes (re-hashed from disk first), recreates holes, and renames a file into DIR, read-only and
// fsynced, only when all its ranges verified, which makes its BLAKE3 the manifest's. The file's
// sha256 is not recomputed: equal by implication (docs/oci.md). Transient failures (5xx,
// truncation, dropped connections, corrupt bytes) are retried per range, with ranged resumption
// inside a range; a range that cannot be fetched intact fails the pull with an error naming the
// file, the range and the layer. Manifests of layout 1 are refused with ErrOldLayout, whose
// message says to push again.
//
// # Transport
//
// Credentials come from the Docker config and credential helpers (authn.DefaultKeychain). TLS is
// required unless WithPlainHTTP names the host or WithInsecure is given; credentials never appear in
// errors, logs or attestations.
package registry
