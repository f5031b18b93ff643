package registry

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"orkpipe/registry/oci"
)

const maxConfigSize = 4 << 20

// Description is what Describe reports about an artifact.
type Description struct {
	Ref      string
	Artifact *Artifact
	Config   ModelConfig
	// Attestations lists every attestation attached (provenance, board verifications, ...). With
	// WithTrust, each carries TrustedBy or the reason it is not trusted.
	Attestations []Attestation
	// SkippedAttestations counts the attestations listed but not fetched: beyond the first 64
	// distinct ones, or beyond 64 MiB of envelopes in all (a warning is logged too).
	SkippedAttestations int
}

// Describe fetches and validates the manifest and config at ref and lists its attestations. It
// downloads no layer.
func Describe(ctx context.Context, ref string, opts ...Option) (*Description, error) {
	o, err := makeOptions(opts)
	if err != nil {
		return nil, err
	}
	r, err := oci.Open(ctx, ref, false, o.conn...)
	if err != nil {
		return nil, err
	}
	art, err := fetchArtifact(ctx, r)
	if err != nil {
		return nil, err
	}
	d := &Description{Ref: ref, Artifact: art}
	cd := art.Manifest.Config
	b, err := r.ReadBlob(ctx, cd, maxConfigSize)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := json.Unmarshal(b, &d.Config); err != nil {
		return nil, fmt.Errorf("config %s: %w", cd.Digest, err)
	}
	if d.Attestations, d.SkippedAttestations, err = attestations(ctx, r, o, art.Digest, o.describeOrder()); err != nil {
		return nil, err
	}
	return d, nil
}

// Attach signs a statement about the artifact at ref (its manifest and files as subjects) with
// predicateType and predicate, and attaches it as a referrer. It is how a later board verification
// is recorded next to the build provenance. It returns the attestation manifest digest.
func Attach(ctx context.Context, ref, predicateType string, predicate json.RawMessage, opts ...Option) (string, error) {
	o, err := makeOptions(opts)
	if err != nil {
		return "", err
	}
	if o.signer == nil {
		return "", fmt.Errorf("attach: a signing key is required (WithSigner)")
	}
	if !json.Valid(predicate) {
		return "", fmt.Errorf("attach: predicate is not valid JSON")
	}
	r, err := oci.Open(ctx, ref, true, o.conn...)
	if err != nil {
		return "", err
	}
	art, err := fetchArtifact(ctx, r)
	if err != nil {
		return "", err
	}
	st := statementFor(r.Name(), art.Digest, art.Files, predicateType, predicate)
	subject := v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: int64(len(art.Raw)), Digest: art.Digest}
	h, err := attach(ctx, r, subject, st, o.signer)
	if err != nil {
		return "", err
	}
	return h.String(), nil
}
