package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"orkpipe/registry/oci"
	"orkpipe/registry/regtest"
)

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "release.key")
	pub, err := GenerateKeyFiles(key)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(key)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("private key mode %v, want 0600", st.Mode().Perm())
	}
	priv, err := LoadPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pub2, err := LoadPublicKey(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(pub2) || !pub.Equal(priv.Public()) {
		t.Fatal("key files do not round-trip")
	}
	if _, err := GenerateKeyFiles(key); !errors.Is(err, os.ErrExist) {
		t.Fatalf("generate over an existing key: %v, want ErrExist", err)
	}
	os.Chmod(key, 0o644)
	if _, err := LoadPrivateKey(key); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("world-readable private key accepted: %v", err)
	}
	if _, err := LoadPublicKey(key); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("private key accepted as a public key: %v", err)
	}
}

func TestSignedPull(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := buildDir(t)
	kdir := t.TempDir()
	if _, err := GenerateKeyFiles(filepath.Join(kdir, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := GenerateKeyFiles(filepath.Join(kdir, "b")); err != nil {
		t.Fatal(err)
	}
	privA, _ := LoadPrivateKey(filepath.Join(kdir, "a"))
	pubA, _ := LoadPublicKey(filepath.Join(kdir, "a.pub"))
	privB, _ := LoadPrivateKey(filepath.Join(kdir, "b"))
	opts := []Option{plain(reg), testRange}

	signed, err := Push(ctx, src, reg.Ref("packs/signed", "v1"), append(opts, WithSigner(privA))...)
	if err != nil {
		t.Fatal(err)
	}
	if signed.Attestation == nil {
		t.Fatal("no attestation returned")
	}
	again, err := Push(ctx, src, reg.Ref("packs/signed", "v1"), append(opts, WithSigner(privA))...)
	if err != nil {
		t.Fatal(err)
	}
	if *again.Attestation != *signed.Attestation {
		t.Errorf("re-signing the same build gave attestation %s, then %s", signed.Attestation, again.Attestation)
	}
	if _, err := Push(ctx, src, reg.Ref("packs/unsigned", "v1"), opts...); err != nil {
		t.Fatal(err)
	}
	if _, err := Push(ctx, src, reg.Ref("packs/otherkey", "v1"), append(opts, WithSigner(privB))...); err != nil {
		t.Fatal(err)
	}
	if _, err := Push(ctx, src, reg.Ref("packs/altered", "v1"), append(opts, WithSigner(privA))...); err != nil {
		t.Fatal(err)
	}
	alterAttestation(t, reg, "packs/altered", signed.Digest)

	d, err := Describe(ctx, reg.Ref("packs/signed", "v1"), plain(reg), WithTrust(pubA))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Attestations) != 1 || len(d.Attestations[0].TrustedBy) != 1 || d.Attestations[0].PredicateType != PredicateSLSAProvenance {
		t.Fatalf("describe attestations: %+v", d.Attestations)
	}
	if d.Config.Config.Format != "orkpack" || d.Config.Descriptor.Name != "stories260K" || !d.Config.Descriptor.CreatedAt.Equal(testCreated) {
		t.Errorf("config: %+v", d.Config)
	}

	for _, tc := range []struct {
		repo, want string
	}{
		{"packs/signed", ""},
		{"packs/unsigned", "no attestations attached (pushed without --sign, or copied without its referrers"},
		{"packs/otherkey", "do not verify with the trusted keys"},
		{"packs/altered", "do not verify with the trusted keys"},
	} {
		t.Run(tc.repo, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "out")
			pr, err := Pull(ctx, reg.Ref(tc.repo, "v1"), dst, plain(reg), WithTrust(pubA))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(pr.Attestations) != 1 {
					t.Errorf("%d trusted attestations, want 1", len(pr.Attestations))
				}
				sameFiles(t, src, dst)
				return
			}
			if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrUntrusted with %q", err, tc.want)
			}
			t.Logf("refused: %v", err)
			noPulledFiles(t, dst)
		})
	}
}

// alterAttestation replaces the attestation of subject in repo by a copy whose statement was edited
// (the signature kept), the way an attacker with registry write access would.
func alterAttestation(t *testing.T, reg *regtest.Registry, repo string, subject v1.Hash) {
	t.Helper()
	ctx := ctxT(t)
	o, _ := makeOptions([]Option{plain(reg)})
	tg, err := oci.Open(ctx, reg.Ref(repo, "v1"), true, o.conn...)
	if err != nil {
		t.Fatal(err)
	}
	atts, _, err := attestations(ctx, tg, o, subject, o.describeOrder())
	if err != nil || len(atts) != 1 || atts[0].Err != nil {
		t.Fatalf("attestations: %v %+v", err, atts)
	}
	env := *atts[0].Envelope
	env.Payload = bytes.Replace(env.Payload, []byte("stories260K"), []byte("stories999K"), 1)
	if bytes.Equal(env.Payload, atts[0].Envelope.Payload) {
		t.Fatal("nothing altered")
	}
	envJSON, _ := json.Marshal(env)
	envDesc, err := tg.PutBlob(ctx, envJSON, MediaTypeDSSE)
	if err != nil {
		t.Fatal(err)
	}
	old, _, err := tg.GetManifest(ctx, atts[0].Digest.String())
	if err != nil {
		t.Fatal(err)
	}
	var m v1.Manifest
	json.Unmarshal(old, &m)
	m.Layers = []v1.Descriptor{envDesc}
	raw, _ := json.Marshal(m)
	h, err := tg.PutManifest(ctx, "", raw)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(raw))
	// Point the referrers (tag-schema fallback) index at the altered attestation only.
	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: types.OCIManifestSchema1, Digest: h, Size: n, ArtifactType: ArtifactTypeAttestation, Annotations: m.Annotations,
	}}}
	ib, _ := json.Marshal(idx)
	putRaw(t, reg.Ref(repo, "sha256-"+subject.Hex), ib, types.OCIImageIndex)
}

// A later "board verification" attestation is attached and listed the same way as the provenance.
func TestAttachBoardVerification(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := buildDir(t)
	kdir := t.TempDir()
	pub, err := GenerateKeyFiles(filepath.Join(kdir, "k"))
	if err != nil {
		t.Fatal(err)
	}
	priv, _ := LoadPrivateKey(filepath.Join(kdir, "k"))
	ref := reg.Ref("packs/board", "v1")
	if _, err := Push(ctx, src, ref, plain(reg), WithSigner(priv)); err != nil {
		t.Fatal(err)
	}
	const boardPredicate = "https://orkpipe.dev/board-verification/v1"
	h, err := Attach(ctx, ref, boardPredicate, json.RawMessage(`{"board":"rk3588-07","result":"pass","ppl":2.68}`), plain(reg), WithSigner(priv))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Describe(ctx, ref, plain(reg), WithTrust(pub))
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, a := range d.Attestations {
		if a.Err != nil || len(a.TrustedBy) != 1 {
			t.Errorf("attestation %s: trusted %v err %v", a.Digest, a.TrustedBy, a.Err)
		}
		types[a.PredicateType] = a.Digest.String()
	}
	if len(types) != 2 || types[boardPredicate] != h || types[PredicateSLSAProvenance] == "" {
		t.Fatalf("attestations listed: %v", types)
	}
	if _, err := Pull(ctx, ref, filepath.Join(t.TempDir(), "out"), plain(reg), WithTrust(pub)); err != nil {
		t.Fatal(err)
	}
}
