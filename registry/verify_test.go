package registry

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/types"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"orkpipe/registry/regtest"
)

// TestPullWholeFileVerification pulls manifests that differ from what push wrote: without the
// BLAKE3 annotation (another tool's artifact), without either whole-file annotation, and with the
// two parts of a file swapped (each part still matches its own layer digest and diffID, so only
// the whole-file digest can catch it).
func TestPullWholeFileVerification(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	writeRandom(t, filepath.Join(src, "w.orkpack"), 512<<10, 7)
	pushed, err := Push(ctx, src, reg.Ref("packs/verify", "v1"), plain(reg), WithPartSize(256<<10), WithCreated(testCreated))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(pushed.Artifact.Manifest.Layers); n != 2 {
		t.Fatalf("pushed %d layers, want 2 parts of one file", n)
	}

	dropBLAKE3 := func(m *v1.Manifest) {
		for _, l := range m.Layers {
			delete(l.Annotations, AnnotationFileBLAKE3)
		}
	}
	dropBoth := func(m *v1.Manifest) {
		dropBLAKE3(m)
		for _, l := range m.Layers {
			delete(l.Annotations, AnnotationFileSHA256)
		}
	}
	swap := func(m *v1.Manifest) { // layer 0 now carries part 1's bytes and vice versa
		a, b := &m.Layers[0], &m.Layers[1]
		a.Digest, b.Digest = b.Digest, a.Digest
		a.Size, b.Size = b.Size, a.Size
		a.Annotations[AnnotationPartSHA256], b.Annotations[AnnotationPartSHA256] = b.Annotations[AnnotationPartSHA256], a.Annotations[AnnotationPartSHA256]
	}
	tests := []struct {
		name    string
		edit    []func(*v1.Manifest)
		want    Verification
		wantErr string // part of the error; "" for success
	}{
		{"as pushed", nil, VerifiedBLAKE3, ""},
		{"no blake3 annotation", []func(*v1.Manifest){dropBLAKE3}, VerifiedSHA256, ""},
		{"no whole-file annotations", []func(*v1.Manifest){dropBoth}, VerifiedParts, ""},
		{"parts swapped", []func(*v1.Manifest){swap}, VerifiedBLAKE3, "assembled file's BLAKE3"},
		{"parts swapped, no blake3 annotation", []func(*v1.Manifest){swap, dropBLAKE3}, VerifiedSHA256, "assembled file's sha256"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m v1.Manifest
			if err := json.Unmarshal(pushed.Artifact.Raw, &m); err != nil {
				t.Fatal(err)
			}
			for _, e := range tc.edit {
				e(&m)
			}
			raw, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			art, err := ParseManifest(raw)
			if err != nil {
				t.Fatalf("edited manifest does not parse: %v", err)
			}
			if got := art.Files[0].Digests.verification(); got != tc.want {
				t.Fatalf("verification of the edited manifest = %q, want %q", got, tc.want)
			}
			ref := reg.Ref("packs/verify", "edit"+string(rune('a'+i)))
			putRaw(t, ref, raw, types.OCIManifestSchema1)
			dst := filepath.Join(t.TempDir(), "out")
			res, err := Pull(ctx, ref, dst, plain(reg))
			if tc.wantErr != "" {
				if err == nil {
					t.Fatal("pull of a manifest with swapped parts succeeded")
				}
				if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "w.orkpack") {
					t.Errorf("error %q: want ErrDigestMismatch naming w.orkpack and %q", err, tc.wantErr)
				}
				noPulledFiles(t, dst)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Files[0].Verified; got != tc.want {
				t.Errorf("PulledFile.Verified = %q, want %q", got, tc.want)
			}
			sameFiles(t, src, dst)
			// Pulling again finds the file present: kept only when a whole-file digest vouches
			// for it; with none, it is refused as an existing, unverifiable file.
			_, err = Pull(ctx, ref, dst, plain(reg))
			if tc.want == VerifiedParts {
				if !errors.Is(err, ErrExists) {
					t.Errorf("second pull without whole-file digests: err %v, want ErrExists", err)
				}
			} else if err != nil {
				t.Errorf("second pull: %v", err)
			}
		})
	}
}

// A present but malformed whole-file annotation is still an invalid manifest.
func TestParseManifestBadWholeFileDigests(t *testing.T) {
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	writeRandom(t, filepath.Join(src, "w.orkpack"), 64<<10, 3)
	pushed, err := Push(ctxT(t), src, reg.Ref("packs/bad", "v1"), plain(reg), WithCreated(testCreated))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ key, value string }{
		{AnnotationFileSHA256, ""},
		{AnnotationFileSHA256, "sha256:abc"},
		{AnnotationFileBLAKE3, ""},
		{AnnotationFileBLAKE3, "blake3:" + strings.Repeat("0", 64)},
		{AnnotationFileBLAKE3, "sha256:" + strings.Repeat("1", 64)},
	}
	for _, tc := range tests {
		var m v1.Manifest
		if err := json.Unmarshal(pushed.Artifact.Raw, &m); err != nil {
			t.Fatal(err)
		}
		m.Layers[0].Annotations[tc.key] = tc.value
		raw, _ := json.Marshal(m)
		if _, err := ParseManifest(raw); !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s = %q: err %v, want ErrInvalidManifest naming the annotation", tc.key, tc.value, err)
		}
	}
}
