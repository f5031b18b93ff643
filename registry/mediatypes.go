package registry

// Media types (CNCF ModelPack, OCI 1.1) and annotation keys. docs/oci.md is the normative description.
//
// The ModelPack media types are those of github.com/modelpack/model-spec, specs-go/v1/mediatype.go:
// a manifest artifactType, a config, and for each of the layer families weight, weight.config,
// doc, code and dataset the four forms .v1.raw, .v1.tar, .v1.tar+gzip and .v1.tar+zstd. orkpipe
// writes the weight and doc families in the raw, tar and tar+zstd forms.
const (
	// ArtifactTypeModel is the manifest artifactType of a pushed pack (ModelPack).
	ArtifactTypeModel = "application/vnd.cncf.model.manifest.v1+json"
	// MediaTypeModelConfig is the config blob of a pushed pack (ModelPack).
	MediaTypeModelConfig = "application/vnd.cncf.model.config.v1+json"

	// ClassWeight and ClassDoc are the ModelPack layer families orkpipe writes: weights (the pack,
	// the stub GGUF, any file that is not a document) and documents (report, provenance, summary).
	ClassWeight = "weight"
	ClassDoc    = "doc"
	// mediaTypePrefix + class + ".v1." + form is a ModelPack layer media type.
	mediaTypePrefix = "application/vnd.cncf.model."

	// MediaTypeOCIManifest is the OCI image manifest media type used for every manifest we write.
	MediaTypeOCIManifest = "application/vnd.oci.image.manifest.v1+json"
	// MediaTypeEmpty is the OCI empty descriptor ("{}") used as the config of attestation manifests.
	MediaTypeEmpty = "application/vnd.oci.empty.v1+json"
	// ArtifactTypeAttestation is the artifactType of an attestation manifest (a referrer of a pack).
	ArtifactTypeAttestation = "application/vnd.dev.orkpipe.attestation.v1+json"
	// MediaTypeDSSE is the single layer of an attestation manifest: a DSSE envelope.
	MediaTypeDSSE = "application/vnd.dsse.envelope.v1+json"
)

// Annotation keys. Every layer is one file and carries all of that file's keys.
const (
	AnnotationFilepath     = "org.cncf.model.filepath"           // layer: the file's name (ModelPack)
	AnnotationFileMetadata = "org.cncf.model.file.metadata+json" // layer: ModelPack file metadata (mode, owner, mtime)
	AnnotationTitle        = "org.opencontainers.image.title"    // layer: the name oras writes the blob to; manifest: model name
	AnnotationCreated      = "org.opencontainers.image.created"  // manifest: build time from provenance
	AnnotationVersion      = "org.opencontainers.image.version"  // manifest: model version
	AnnotationRevision     = "org.opencontainers.image.revision" // manifest: model revision
	// The model's description from its GGUF header (provenance.json's model), for registries'
	// pages and `oras manifest fetch`: the OCI image-spec's pre-defined annotation keys.
	AnnotationAuthors       = "org.opencontainers.image.authors"       // manifest: general.author
	AnnotationVendor        = "org.opencontainers.image.vendor"        // manifest: general.organization
	AnnotationLicenses      = "org.opencontainers.image.licenses"      // manifest: the SPDX license expression
	AnnotationDescription   = "org.opencontainers.image.description"   // manifest: general.description
	AnnotationDocumentation = "org.opencontainers.image.documentation" // manifest: general.url
	AnnotationSource        = "org.opencontainers.image.source"        // manifest: general.repo_url

	AnnotationFormat       = "dev.orkpipe.format"         // manifest: layout version of this artifact ("2")
	AnnotationBoardProfile = "dev.orkpipe.board-profile"  // manifest: board profile the pack targets
	AnnotationRecipe       = "dev.orkpipe.recipe.digest"  // manifest: recipe digest (blake3:...)
	AnnotationFileSize     = "dev.orkpipe.file.size"      // layer: the file's size in bytes (decimal)
	AnnotationFileSHA256   = "dev.orkpipe.file.sha256"    // layer: sha256 of the file (holes as zeros)
	AnnotationFileBLAKE3   = "dev.orkpipe.file.blake3"    // layer: BLAKE3 of the file (holes as zeros)
	AnnotationFileExtents  = "dev.orkpipe.file.extents"   // layer: JSON [[offset,length],...] data extents, when the file has holes
	AnnotationRangeSize    = "dev.orkpipe.range.size"     // layer: bytes per verification range, when more than one
	AnnotationRangeBLAKE3  = "dev.orkpipe.range.blake3"   // layer: BLAKE3 chaining value of each range, hex, comma-separated
	AnnotationRangeStored  = "dev.orkpipe.range.stored"   // layer (tar forms): JSON [[offset,length],...] of each range in the blob
	AnnotationPredicate    = "dev.orkpipe.predicate-type" // attestation manifest: in-toto predicate type

	// FormatVersion is the value of AnnotationFormat this package writes and reads.
	FormatVersion = "2"
	// formatV1 is the previous layout (a file split over several byte-range layers, media types
	// outside ModelPack's list); pull refuses it with a message saying how to re-push.
	formatV1 = "1"
)
