package registry

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"orkpipe/registry/oci"
	"orkpipe/registry/regtest"
)

// smallSignedSource returns a build directory of one small file and its provenance, and a fresh
// signing key pair.
func smallSignedSource(t *testing.T) (dir string, pub ed25519.PublicKey, priv ed25519.PrivateKey) {
	t.Helper()
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeProvenance(t, dir)
	kdir := t.TempDir()
	pub, err := GenerateKeyFiles(filepath.Join(kdir, "k"))
	if err != nil {
		t.Fatal(err)
	}
	if priv, err = LoadPrivateKey(filepath.Join(kdir, "k")); err != nil {
		t.Fatal(err)
	}
	return dir, pub, priv
}

// TestAttestationBounds is probe finding F1: a referrers index listing one ~16 MiB attestation 400
// times made describe and pull --trust fetch and hold every copy (out of memory). A digest listed
// again is fetched once; at most maxAttestations distinct attestations and maxAttestationBytes of
// envelopes are fetched, the others counted as skipped (and named in pull --trust's refusal).
func TestAttestationBounds(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src, pub, priv := smallSignedSource(t)
	ref := reg.Ref("packs/refs", "v1")
	res, err := Push(ctx, src, ref, plain(reg), WithSigner(priv))
	if err != nil {
		t.Fatal(err)
	}
	subject := res.Artifact.Digest
	o, _ := makeOptions([]Option{plain(reg)})
	r, err := oci.Open(ctx, ref, true, o.conn...)
	if err != nil {
		t.Fatal(err)
	}
	signed, _, err := attestations(ctx, r, o, subject, o.describeOrder())
	if err != nil || len(signed) != 1 {
		t.Fatalf("the push's attestation: %v %+v", err, signed)
	}
	prov := signed[0].Digest

	// Attestation manifests of subject with an envelope of n bytes (a statement whose predicate is
	// a long string), each made distinct by an annotation.
	makeAtts := func(count, n int) []v1.Hash {
		st := statementFor("x", subject, nil, "https://example.com/big", json.RawMessage(`"`+strings.Repeat("x", n)+`"`))
		env, err := SignStatement(st, priv)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(env)
		envDesc, err := r.PutBlob(ctx, b, MediaTypeDSSE)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := r.PutBlob(ctx, emptyJSON, MediaTypeEmpty)
		if err != nil {
			t.Fatal(err)
		}
		var out []v1.Hash
		for i := range count {
			m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: ArtifactTypeAttestation,
				Config: cfg, Layers: []v1.Descriptor{envDesc}, Subject: &v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: subject, Size: int64(len(res.Artifact.Raw))},
				Annotations: map[string]string{"n": fmt.Sprint(n, "-", i)}}
			raw, _ := json.Marshal(m)
			h, err := r.PutManifest(ctx, "", raw)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, h)
		}
		return out
	}
	// setIndex makes the referrers (tag-schema fallback) index list digests, in order, with no
	// annotations: an index that does not name the predicate types (as a tool other than a
	// registry or go-containerregistry may write), so the provenance is not fetched first.
	setIndex := func(digests []v1.Hash) {
		idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
		for _, h := range digests {
			raw, _, err := r.GetManifest(ctx, h.String())
			if err != nil {
				t.Fatal(err)
			}
			idx.Manifests = append(idx.Manifests, v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: h, Size: int64(len(raw)), ArtifactType: ArtifactTypeAttestation})
		}
		b, _ := json.Marshal(idx)
		putRaw(t, reg.Ref("packs/refs", "sha256-"+subject.Hex), b, types.OCIImageIndex)
	}
	repeat := func(h v1.Hash, n int) []v1.Hash {
		var out []v1.Hash
		for range n {
			out = append(out, h)
		}
		return out
	}
	small := makeAtts(maxAttestations+6, 100)
	big := makeAtts(20, 5<<20)

	cases := []struct {
		name          string
		index         []v1.Hash
		fetched, skip int
		trusted       bool
	}{
		{"one attestation listed 400 times", repeat(prov, 400), 1, 0, true},
		{"more attestations than fetched", append([]v1.Hash{prov}, small...), maxAttestations, 7, true},
		{"the provenance past the count", append(small[:len(small):len(small)], prov), maxAttestations, 7, false},
		// 9 envelopes of 6.7 MiB fit in 64 MiB; the provenance, a few KiB, still does.
		{"more envelope bytes than fetched", append(big, prov), 10, 11, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			setIndex(c.index)
			d, err := Describe(ctx, ref, plain(reg))
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Attestations) != c.fetched || d.SkippedAttestations != c.skip {
				t.Errorf("describe: %d attestations fetched, %d skipped; want %d, %d", len(d.Attestations), d.SkippedAttestations, c.fetched, c.skip)
			}
			_, err = Pull(ctx, ref, filepath.Join(t.TempDir(), "out"), plain(reg), WithTrust(pub))
			switch {
			case c.trusted && err != nil:
				t.Errorf("pull --trust: %v", err)
			case !c.trusted && (!errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), fmt.Sprintf("%d more attestations not fetched", c.skip))):
				t.Errorf("pull --trust: %v, want ErrUntrusted saying %d were not fetched", err, c.skip)
			}
		})
	}
}

// TestTrustedProvenanceAfterDecoys: with more than maxAttestations attestations attached, the
// ones fetched were the first listed, so a provenance attested after 70 others (a board
// verification per run, or anyone who may push flooding the repository) was never fetched and pull
// --trust failed although it was there. The referrers index names each attestation's predicate type
// (the dev.orkpipe.predicate-type annotation, copied from its manifest); the provenance is fetched
// first.
func TestTrustedProvenanceAfterDecoys(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src, pub, priv := smallSignedSource(t)
	ref := reg.Ref("packs/decoys", "v1")
	pushed, err := Push(ctx, src, ref, plain(reg)) // unsigned: the provenance is attached last
	if err != nil {
		t.Fatal(err)
	}
	const decoys = maxAttestations + 8
	for i := range decoys {
		if _, err := Attach(ctx, ref, "https://example.com/decoy/v1", json.RawMessage(fmt.Sprintf(`{"run":%d}`, i)), plain(reg), WithSigner(priv)); err != nil {
			t.Fatal(err)
		}
	}
	prov, err := os.ReadFile(filepath.Join(src, ProvenanceFile))
	if err != nil {
		t.Fatal(err)
	}
	var st Statement
	if err := json.Unmarshal(prov, &st); err != nil {
		t.Fatal(err)
	}
	h, err := Attach(ctx, ref, PredicateSLSAProvenance, st.Predicate, plain(reg), WithSigner(priv))
	if err != nil {
		t.Fatal(err)
	}
	// The referrers index as go-containerregistry maintains it (descriptors sorted by digest, each
	// with its manifest's annotations), the provenance moved last: the order of a registry that
	// lists referrers as they were pushed.
	fallback := reg.Ref("packs/decoys", "sha256-"+pushed.Artifact.Digest.Hex)
	o, _ := makeOptions([]Option{plain(reg)})
	r, err := oci.Open(ctx, fallback, false, o.conn...)
	if err != nil {
		t.Fatal(err)
	}
	raw, _, err := r.GetManifest(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	var last []v1.Descriptor
	idx.Manifests = slices.DeleteFunc(idx.Manifests, func(d v1.Descriptor) bool {
		if d.Digest.String() == h {
			last = append(last, d)
			return true
		}
		return false
	})
	if len(last) != 1 || len(idx.Manifests) != decoys || last[0].Annotations[AnnotationPredicate] != PredicateSLSAProvenance {
		t.Fatalf("referrers index: %d decoys, provenance %+v; want %d decoys and the provenance annotated with its predicate type", len(idx.Manifests), last, decoys)
	}
	idx.Manifests = append(idx.Manifests, last...)
	b, _ := json.Marshal(idx)
	putRaw(t, fallback, b, types.OCIImageIndex)

	res, err := Pull(ctx, ref, filepath.Join(t.TempDir(), "out"), plain(reg), WithTrust(pub))
	if err != nil {
		t.Fatalf("pull --trust with the provenance listed after %d other attestations: %v", decoys, err)
	}
	if len(res.Attestations) != 1 || res.Attestations[0].Digest.String() != h {
		t.Errorf("pull --trust accepted %+v, want the provenance %s", res.Attestations, h)
	}
	d, err := Describe(ctx, ref, plain(reg))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Attestations) != maxAttestations || d.SkippedAttestations != decoys+1-maxAttestations {
		t.Errorf("describe: %d attestations fetched, %d skipped; want %d, %d", len(d.Attestations), d.SkippedAttestations, maxAttestations, decoys+1-maxAttestations)
	}
	found := false
	for _, a := range d.Attestations {
		found = found || a.Digest.String() == h
	}
	if !found {
		t.Errorf("describe did not fetch the provenance %s", h)
	}
}
