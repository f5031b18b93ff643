package registry

// Media types (CNCF ModelPack, OCI 1.1) and annotation keys. docs/oci.md is the normative description.
const (
	// ArtifactTypeModel is the manifest artifactType of a pushed pack (ModelPack).
	ArtifactTypeModel = "application/vnd.cncf.model.manifest.v1+json"
	// MediaTypeModelConfig is the config blob of a pushed pack (ModelPack).
	MediaTypeModelConfig = "application/vnd.cncf.model.config.v1+json"
	// MediaTypeWeightRaw is a layer holding (a byte range of) a weight file: the pack or the stub GGUF.
	MediaTypeWeightRaw = "application/vnd.cncf.model.weight.v1.raw"
	// MediaTypeDocRaw is a layer holding (a byte range of) a document: report.json, provenance.json.
	MediaTypeDocRaw = "application/vnd.cncf.model.doc.v1.raw"
	// SuffixZstd marks a zstd-compressed layer: the layer digest covers the compressed bytes.
	SuffixZstd = "+zstd"

	// MediaTypeOCIManifest is the OCI image manifest media type used for every manifest we write.
	MediaTypeOCIManifest = "application/vnd.oci.image.manifest.v1+json"
	// MediaTypeEmpty is the OCI empty descriptor ("{}") used as the config of attestation manifests.
	MediaTypeEmpty = "application/vnd.oci.empty.v1+json"
	// ArtifactTypeAttestation is the artifactType of an attestation manifest (a referrer of a pack).
	ArtifactTypeAttestation = "application/vnd.dev.orkpipe.attestation.v1+json"
	// MediaTypeDSSE is the single layer of an attestation manifest: a DSSE envelope.
	MediaTypeDSSE = "application/vnd.dsse.envelope.v1+json"
)

// Annotation keys. Layer keys describe the file and the part a layer carries; every layer of a file
// repeats the file-level keys so that each layer is self-describing.
const (
	AnnotationFilepath = "org.cncf.model.filepath"           // file name inside the pushed directory
	AnnotationCreated  = "org.opencontainers.image.created"  // manifest: build time from provenance
	AnnotationTitle    = "org.opencontainers.image.title"    // manifest: model name
	AnnotationVersion  = "org.opencontainers.image.version"  // manifest: model version
	AnnotationRevision = "org.opencontainers.image.revision" // manifest: model revision

	AnnotationFormat       = "dev.orkpipe.format"         // manifest: layout version of this artifact ("1")
	AnnotationBoardProfile = "dev.orkpipe.board-profile"  // manifest: board profile the pack targets
	AnnotationRecipe       = "dev.orkpipe.recipe.digest"  // manifest: recipe digest (blake3:...)
	AnnotationFileSize     = "dev.orkpipe.file.size"      // layer: whole file size in bytes (decimal)
	AnnotationFileSHA256   = "dev.orkpipe.file.sha256"    // layer: sha256 of the whole uncompressed file
	AnnotationFileBLAKE3   = "dev.orkpipe.file.blake3"    // layer: BLAKE3 of the whole uncompressed file
	AnnotationPart         = "dev.orkpipe.part"           // layer: "INDEX/COUNT", 0-based
	AnnotationPartExtents  = "dev.orkpipe.part.extents"   // layer: JSON [[offset,length],...] the layer's bytes fill
	AnnotationPartSHA256   = "dev.orkpipe.part.sha256"    // layer: sha256 of the uncompressed layer bytes (= diffID)
	AnnotationPredicate    = "dev.orkpipe.predicate-type" // attestation manifest: in-toto predicate type

	// FormatVersion is the value of AnnotationFormat this package writes and reads.
	FormatVersion = "1"
)
