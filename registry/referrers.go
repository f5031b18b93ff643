package registry

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

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

// Bounds of what attestations fetches and holds: referrers are written by anyone who may push to
// the repository, and a referrers index can list the same big envelope hundreds of times.
const (
	// maxAttestations is how many distinct attestations are fetched; the rest are counted, not fetched.
	maxAttestations = 64
	// maxAttestationBytes is the envelope bytes fetched across all attestations (each envelope is
	// held decoded, with its statement's predicate: about twice this in memory at most).
	maxAttestationBytes = 64 << 20
)

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
// parsed, and (when trust keys are given) verified, in the referrers index's order. A digest listed
// more than once is fetched once; at most maxAttestations are fetched, and envelopes of at most
// maxAttestationBytes in all: the attestations past either bound are not fetched and their number
// is returned as skipped (and logged as a warning). Those whose index descriptor names (in
// AnnotationPredicate, copied from the attestation manifest) one of the predicate types first lists
// are fetched first, in first's order, then the others in the index's order, so that attestations of
// other predicate types listed before them (board verifications, or a flood by anyone who may push)
// cannot push them past the bounds (more than maxAttestations annotated with those types still can).
func attestations(ctx context.Context, r *oci.Repo, o *options, subject v1.Hash, first []string) (out []Attestation, skipped int, err error) {
	descs, err := r.Referrers(ctx, subject, ArtifactTypeAttestation)
	if err != nil {
		return nil, 0, err
	}
	type listed struct {
		pos int // in descs
		a   Attestation
	}
	var fetched []listed
	budget := int64(maxAttestationBytes)
	for _, i := range fetchOrder(descs, first) {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		if len(fetched) == maxAttestations {
			skipped++
			continue
		}
		a, used, ok := fetchAttestation(ctx, r, o, subject, descs[i].Digest, budget)
		if !ok {
			skipped++
			continue
		}
		budget -= used
		fetched = append(fetched, listed{i, a})
	}
	slices.SortFunc(fetched, func(a, b listed) int { return a.pos - b.pos })
	for _, l := range fetched {
		out = append(out, l.a)
	}
	if skipped > 0 {
		r.Logger().Warn("attestations not fetched", "subject", subject.String(), "fetched", len(out), "skipped", skipped,
			"why", fmt.Sprintf("at most %d attestations and %d MiB of envelopes are fetched", maxAttestations, maxAttestationBytes>>20))
	}
	return out, skipped, nil
}

// fetchOrder returns the indexes of the distinct digests of descs (each digest's first listing)
// in the order to fetch them: those annotated with predicate type want[0] first, then want[1]'s,
// and so on, then the others, each group in the index's order.
func fetchOrder(descs []v1.Descriptor, want []string) []int {
	seen := map[v1.Hash]bool{}
	groups := make([][]int, len(want)+1)
	for i, d := range descs {
		if seen[d.Digest] {
			continue
		}
		seen[d.Digest] = true
		g := slices.Index(want, d.Annotations[AnnotationPredicate])
		if g < 0 {
			g = len(want)
		}
		groups[g] = append(groups[g], i)
	}
	return slices.Concat(groups...)
}

// describeOrder returns the predicate types Describe fetches first: those WithPreferredPredicates
// named, then SLSA provenance.
func (o *options) describeOrder() []string {
	return appendNew(slices.Clone(o.preferred), PredicateSLSAProvenance)
}

// pullOrder returns the predicate types Pull fetches first: SLSA provenance (what --trust needs),
// then those WithPreferredPredicates named.
func (o *options) pullOrder() []string {
	return appendNew([]string{PredicateSLSAProvenance}, o.preferred...)
}

// appendNew appends to list the types it does not hold yet.
func appendNew(list []string, types ...string) []string {
	for _, t := range types {
		if !slices.Contains(list, t) {
			list = append(list, t)
		}
	}
	return list
}

// fetchAttestation fetches, parses and (with trust keys) verifies attestation h of subject, and
// returns the envelope bytes it fetched. An envelope larger than budget (and within
// maxEnvelopeSize, beyond which it is an error) is not fetched: fetched is false.
func fetchAttestation(ctx context.Context, r *oci.Repo, o *options, subject, h v1.Hash, budget int64) (a Attestation, used int64, fetched bool) {
	a.Digest = h
	m, err := attestationManifest(ctx, r, subject, h)
	if err == nil {
		env := m.Layers[0]
		if env.Size > budget && env.Size <= maxEnvelopeSize {
			return a, 0, false
		}
		var b []byte
		if b, err = r.ReadBlob(ctx, env, maxEnvelopeSize); err == nil {
			used = env.Size
			err = a.parse(b, o, subject)
		}
	}
	if err != nil {
		a.Err = fmt.Errorf("attestation %s: %w", h, err)
	}
	return a, used, true
}

// attestationManifest fetches the manifest of attestation h and checks that it is one of subject,
// with one DSSE layer.
func attestationManifest(ctx context.Context, r *oci.Repo, subject, h v1.Hash) (*v1.Manifest, error) {
	raw, _, err := r.GetManifest(ctx, h.String())
	if err != nil {
		return nil, err
	}
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m.Subject == nil || m.Subject.Digest != subject {
		return nil, fmt.Errorf("subject is not %s", subject)
	}
	if len(m.Layers) != 1 || string(m.Layers[0].MediaType) != MediaTypeDSSE {
		return nil, fmt.Errorf("want exactly one %s layer", MediaTypeDSSE)
	}
	return &m, nil
}

// parse fills a from its envelope's bytes b: the envelope, its signers, its statement and (with
// trust keys) the keys that signed it, which must name subject.
func (a *Attestation) parse(b []byte, o *options, subject v1.Hash) error {
	var err error
	if a.Envelope, err = ParseEnvelope(b); err != nil {
		return err
	}
	for _, s := range a.Envelope.Signatures {
		a.Signers = append(a.Signers, s.KeyID)
	}
	if a.Statement, err = a.Envelope.Statement(); err != nil {
		return err
	}
	a.PredicateType = a.Statement.PredicateType
	if len(o.trust) > 0 {
		if a.TrustedBy, err = a.Envelope.Verify(o.trust); err != nil {
			return err
		}
		if !subjectNames(a.Statement, subject.String()) {
			a.TrustedBy = nil
			return fmt.Errorf("%w: signed statement does not name manifest %s as a subject", ErrUntrusted, subject.String())
		}
	}
	return nil
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
