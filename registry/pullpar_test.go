package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/types"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"orkpipe/internal/testfiles"
	"orkpipe/registry/regtest"
)

// parallelSource pushes a 21 MiB random file cut into 7 parts that do not fall on the 4 MiB
// BLAKE3 pieces (so pull hashes most pieces from the streams and reads the seams back), and a
// 64 MiB sparse stub (hole pieces), and returns the source directory and the push result.
func parallelSource(t *testing.T, reg *regtest.Registry, ref string) (string, *PushResult) {
	t.Helper()
	src := t.TempDir()
	writeRandom(t, filepath.Join(src, "w.orkpack"), 21<<20+999, 3)
	makeSparseStub(t, testfiles.Path(t, "stories260K.gguf"), filepath.Join(src, "w.orkpack.gguf"), 14176, 64<<20)
	res, err := Push(ctxT(t), src, ref, plain(reg), WithPartSize(3<<20+12345), WithCreated(testCreated))
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := res.Artifact.File("w.orkpack"); len(f.Parts) != 7 {
		t.Fatalf("w.orkpack pushed as %d parts, want 7", len(f.Parts))
	}
	return src, res
}

// TestPullParallelParts pulls parts in parallel, intact and with the middle part of a file
// corrupted in transit once (retried) or every time (refused, naming the part and its digest,
// leaving the file that was in the destination untouched even with force).
func TestPullParallelParts(t *testing.T) {
	ctx := ctxT(t)
	proxy := &regtest.FaultProxy{}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.Next = h; return proxy })
	ref := reg.Ref("packs/parallel", "v1")
	src, pushed := parallelSource(t, reg, ref)
	f, _ := pushed.Artifact.File("w.orkpack")
	mid := f.Parts[3]
	for _, tc := range []struct {
		name    string
		faults  int
		wantErr bool
	}{
		{"intact", 0, false},
		{"middle part corrupted once", 1, false},
		{"middle part corrupted every time", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy.SetOnly("flip", tc.faults, mid.Layer.Digest.String())
			defer proxy.Set("", 0, 0)
			dst := filepath.Join(t.TempDir(), "out")
			if !tc.wantErr {
				pr, err := Pull(ctx, ref, dst, plain(reg), WithJobs(4), WithRetries(3))
				if err != nil {
					t.Fatal(err)
				}
				for _, pf := range pr.Files {
					if pf.Verified != VerifiedBLAKE3 {
						t.Errorf("%s verified by %q, want %q", pf.Name, pf.Verified, VerifiedBLAKE3)
					}
				}
				sameFiles(t, src, dst)
				return
			}
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			old := []byte("an older w.orkpack that a failed pull must leave alone")
			if err := os.WriteFile(filepath.Join(dst, "w.orkpack"), old, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Pull(ctx, ref, dst, plain(reg), WithJobs(4), WithRetries(3), WithForce())
			if err == nil {
				t.Fatal("pull succeeded although part 3 is corrupted on every download")
			}
			want := fmt.Sprintf("w.orkpack part 3/7 (layer %s)", mid.Layer.Digest)
			if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), want) {
				t.Errorf("error %q: want ErrDigestMismatch naming %q", err, want)
			}
			if b, err := os.ReadFile(filepath.Join(dst, "w.orkpack")); err != nil || !bytes.Equal(b, old) {
				t.Errorf("the destination's w.orkpack changed by a failed pull (err %v)", err)
			}
		})
	}
}

// TestPullSwappedPartsStreamed swaps two full, equally long parts of the 7-part file in the
// manifest: each still matches its own layer digest and diffID, and only the whole-file BLAKE3,
// merged from pieces hashed in the part streams, can refuse it.
func TestPullSwappedPartsStreamed(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	_, pushed := parallelSource(t, reg, reg.Ref("packs/swap", "v1"))
	var m v1.Manifest
	if err := json.Unmarshal(pushed.Artifact.Raw, &m); err != nil {
		t.Fatal(err)
	}
	var idx []int
	for i, l := range m.Layers {
		if l.Annotations[AnnotationFilepath] == "w.orkpack" && (l.Annotations[AnnotationPart] == "1/7" || l.Annotations[AnnotationPart] == "2/7") {
			idx = append(idx, i)
		}
	}
	if len(idx) != 2 {
		t.Fatalf("found layers %v for parts 1 and 2", idx)
	}
	a, b := &m.Layers[idx[0]], &m.Layers[idx[1]]
	a.Digest, b.Digest = b.Digest, a.Digest
	a.Annotations[AnnotationPartSHA256], b.Annotations[AnnotationPartSHA256] = b.Annotations[AnnotationPartSHA256], a.Annotations[AnnotationPartSHA256]
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseManifest(raw); err != nil {
		t.Fatalf("edited manifest does not parse: %v", err)
	}
	ref := reg.Ref("packs/swap", "swapped")
	putRaw(t, ref, raw, types.OCIManifestSchema1)
	dst := filepath.Join(t.TempDir(), "out")
	_, err = Pull(ctx, ref, dst, plain(reg), WithJobs(4))
	if err == nil {
		t.Fatal("pull of a manifest with swapped parts succeeded")
	}
	if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), "assembled file's BLAKE3") || !strings.Contains(err.Error(), "w.orkpack") {
		t.Errorf("error %q: want ErrDigestMismatch naming w.orkpack and its BLAKE3", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "w.orkpack")); !os.IsNotExist(err) {
		t.Errorf("w.orkpack appeared in the destination although its pull failed (err %v)", err)
	}
}
