package registry

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"orkpipe/registry/oci"
)

// Attestations are referrers of a pack manifest: an OCI image manifest with artifactType
// ArtifactTypeAttestation, the empty config, one MediaTypeDSSE layer (the signed envelope) and
// `subject` = the pack manifest. Any predicate type can be attached and listed this way (SLSA
// provenance at push; a board verification later). Registries without the OCI 1.1 referrers API
// get the tag-schema fallback ("sha256-<hex>" index), handled by go-containerregistry.

const maxEnvelopeSize = 16 << 20

var emptyJSON = []byte("{}")

// Attestation is one attestation found attached to a manifest.
type Attestation struct {
	Digest        v1.Hash // of the attestation manifest
	PredicateType string
	Envelope      *Envelope
	Statement     *Statement
	// TrustedBy lists the trusted key IDs with a valid signature (empty when no trust keys were given).
	TrustedBy []string
	// Signers lists the key IDs the envelope claims.
	Signers []string
	// Err says why the attestation is unusable or untrusted (nil when TrustedBy is non-empty or no trust
	// keys were given and it parsed).
	Err error
}

// attach signs st with key and attaches it to the manifest subject (in t's repository).
func attach(ctx context.Context, r *oci.Repo, subject v1.Descriptor, st Statement, key []byte) (v1.Hash, error) {
	env, err := SignStatement(st, key)
	if err != nil {
		return v1.Hash{}, err
	}
	envJSON, err := json.Marshal(env)
	if err != nil {
		return v1.Hash{}, err
	}
	envDesc, err := r.PutBlob(ctx, envJSON, MediaTypeDSSE)
	if err != nil {
		return v1.Hash{}, err
	}
	cfgDesc, err := r.PutBlob(ctx, emptyJSON, MediaTypeEmpty)
	if err != nil {
		return v1.Hash{}, err
	}
	subject.Annotations = nil
	subject.ArtifactType = ""
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  ArtifactTypeAttestation,
		Config:        cfgDesc,
		Layers:        []v1.Descriptor{envDesc},
		Subject:       &subject,
		Annotations:   map[string]string{AnnotationPredicate: st.PredicateType},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return v1.Hash{}, err
	}
	h, err := r.PutManifest(ctx, "", raw)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("attestation for %s: %w", subject.Digest, err)
	}
	return h, nil
}

// attestations lists the attestations attached to subject, each fetched, digest-checked and
// parsed, and (when trust keys are given) verified.
func attestations(ctx context.Context, r *oci.Repo, o *options, subject v1.Hash) ([]Attestation, error) {
	descs, err := r.Referrers(ctx, subject, ArtifactTypeAttestation)
	if err != nil {
		return nil, err
	}
	var out []Attestation
	for _, desc := range descs {
		out = append(out, fetchAttestation(ctx, r, o, subject, desc.Digest))
	}
	return out, nil
}

func fetchAttestation(ctx context.Context, r *oci.Repo, o *options, subject, h v1.Hash) Attestation {
	a := Attestation{Digest: h}
	fail := func(err error) Attestation { a.Err = fmt.Errorf("attestation %s: %w", h, err); return a }
	raw, _, err := r.GetManifest(ctx, h.String())
	if err != nil {
		return fail(err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return fail(err)
	}
	if m.Subject == nil || m.Subject.Digest != subject {
		return fail(fmt.Errorf("subject is not %s", subject))
	}
	if len(m.Layers) != 1 || string(m.Layers[0].MediaType) != MediaTypeDSSE {
		return fail(fmt.Errorf("want exactly one %s layer", MediaTypeDSSE))
	}
	b, err := r.ReadBlob(ctx, m.Layers[0], maxEnvelopeSize)
	if err != nil {
		return fail(err)
	}
	if a.Envelope, err = ParseEnvelope(b); err != nil {
		return fail(err)
	}
	for _, s := range a.Envelope.Signatures {
		a.Signers = append(a.Signers, s.KeyID)
	}
	if a.Statement, err = a.Envelope.Statement(); err != nil {
		return fail(err)
	}
	a.PredicateType = a.Statement.PredicateType
	if len(o.trust) > 0 {
		if a.TrustedBy, err = a.Envelope.Verify(o.trust); err != nil {
			return fail(err)
		}
		if !subjectNames(a.Statement, subject.String()) {
			a.TrustedBy = nil
			return fail(fmt.Errorf("%w: signed statement does not name manifest %s as a subject", ErrUntrusted, subject.String()))
		}
	}
	return a
}

// subjectNames reports whether st has a subject with sha256 digest d ("sha256:<hex>").
func subjectNames(st *Statement, d string) bool {
	h, err := v1.NewHash(d)
	if err != nil {
		return false
	}
	for _, s := range st.Subject {
		if s.Digest["sha256"] == h.Hex {
			return true
		}
	}
	return false
}

// statementFor builds the statement attached to a pushed pack: the manifest and every file as
// subjects (sha256, and blake3 for files), with the given predicate.
func statementFor(repo string, manifest v1.Hash, files []File, predicateType string, predicate json.RawMessage) Statement {
	st := Statement{Type: StatementTypeV1, PredicateType: predicateType, Predicate: predicate}
	st.Subject = append(st.Subject, Subject{Name: repo, Digest: map[string]string{"sha256": manifest.Hex}})
	for _, f := range files {
		sh, _ := v1.NewHash(f.Digests.SHA256)
		st.Subject = append(st.Subject, Subject{Name: f.Name, Digest: map[string]string{
			"sha256": sh.Hex, "blake3": hex.EncodeToString(f.Digests.BLAKE3.Bytes()),
		}})
	}
	return st
}
