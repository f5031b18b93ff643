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

	"orkpipe/artifacts"
	"orkpipe/internal/testfiles"
	"orkpipe/registry/regtest"
)

// parallelSource pushes a 21 MiB random file (raw, six ranges: five of 4 MiB and a short last one)
// and a 64 MiB sparse stub (tar, sixteen ranges, most of holes only) and returns the source
// directory and the push result.
func parallelSource(t *testing.T, reg *regtest.Registry, ref string) (string, *PushResult) {
	t.Helper()
	src := t.TempDir()
	writeRandom(t, filepath.Join(src, "w.orkpack"), 21<<20+999, 3)
	makeSparseStub(t, testfiles.Path(t, "stories260K.gguf"), filepath.Join(src, "w.orkpack.gguf"), 14176, 64<<20)
	res, err := Push(ctxT(t), src, ref, plain(reg), testRange, WithCreated(testCreated))
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := res.Artifact.File("w.orkpack"); len(f.Ranges) != 6 || f.Form != FormRaw {
		t.Fatalf("w.orkpack pushed as %d ranges of a %s layer, want 6 of a raw one", len(f.Ranges), f.Form)
	}
	return src, res
}

// TestPullParallelRanges pulls ranges in parallel, intact and with one range of a file corrupted in
// transit once (retried) or every time (refused, naming the range and the layer, leaving the file
// that was in the destination untouched even with force).
func TestPullParallelRanges(t *testing.T) {
	ctx := ctxT(t)
	proxy := &regtest.FaultProxy{}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.Next = h; return proxy })
	ref := reg.Ref("packs/parallel", "v1")
	src, pushed := parallelSource(t, reg, ref)
	f, _ := pushed.Artifact.File("w.orkpack")
	for _, tc := range []struct {
		name    string
		faults  int
		wantErr bool
	}{
		{"intact", 0, false},
		{"one range corrupted once", 1, false},
		{"every range corrupted every time", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy.SetOnly("flip", tc.faults, f.Layer.Digest.String())
			defer proxy.Set("", 0, 0)
			dst := filepath.Join(t.TempDir(), "out")
			if !tc.wantErr {
				if _, err := Pull(ctx, ref, dst, plain(reg), WithJobs(4), WithRetries(3)); err != nil {
					t.Fatal(err)
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
				t.Fatal("pull succeeded although every range of w.orkpack is corrupted on every download")
			}
			want := fmt.Sprintf("of layer %s)", f.Layer.Digest)
			if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), "pull w.orkpack range ") || !strings.Contains(err.Error(), want) {
				t.Errorf("error %q: want ErrDigestMismatch naming w.orkpack, its range and %q", err, want)
			}
			if b, err := os.ReadFile(filepath.Join(dst, "w.orkpack")); err != nil || !bytes.Equal(b, old) {
				t.Errorf("the destination's w.orkpack changed by a failed pull (err %v)", err)
			}
		})
	}
}

// TestPullSwappedRanges edits pushed manifests the way a broken or hostile pusher could: two range
// values swapped (their merge no longer gives the file's BLAKE3: refused before anything is
// fetched), and both the values and the file's BLAKE3 rewritten consistently for swapped content
// (every range then fails its check: the bytes in the blob are not what the manifest claims).
func TestPullSwappedRanges(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	_, pushed := parallelSource(t, reg, reg.Ref("packs/swap", "v1"))
	edit := func(mod func(f File, a map[string]string)) []byte {
		var m v1.Manifest
		if err := json.Unmarshal(pushed.Artifact.Raw, &m); err != nil {
			t.Fatal(err)
		}
		for i, l := range m.Layers {
			if l.Annotations[AnnotationFilepath] == "w.orkpack" {
				f, _ := pushed.Artifact.File("w.orkpack")
				mod(f, m.Layers[i].Annotations)
			}
		}
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	swapped := func(f File) []artifacts.ChainValue {
		cvs := rangeCVs(f)
		cvs[1], cvs[2] = cvs[2], cvs[1]
		return cvs
	}
	setCVs := func(a map[string]string, cvs []artifacts.ChainValue) {
		var hx []string
		for _, cv := range cvs {
			hx = append(hx, cvHex(cv))
		}
		a[AnnotationRangeBLAKE3] = strings.Join(hx, ",")
	}
	only := edit(func(f File, a map[string]string) { setCVs(a, swapped(f)) })
	if _, err := ParseManifest(only); !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), "merge into") {
		t.Fatalf("manifest with two range values swapped: %v, want a refusal", err)
	}
	consistent := edit(func(f File, a map[string]string) {
		cvs := swapped(f)
		setCVs(a, cvs)
		root, err := artifacts.RootDigest(cvs)
		if err != nil {
			t.Fatal(err)
		}
		a[AnnotationFileBLAKE3] = root.String()
	})
	if _, err := ParseManifest(consistent); err != nil {
		t.Fatalf("edited manifest does not parse: %v", err)
	}
	ref := reg.Ref("packs/swap", "swapped")
	putRaw(t, ref, consistent, types.OCIManifestSchema1)
	dst := filepath.Join(t.TempDir(), "out")
	_, err := Pull(ctx, ref, dst, plain(reg), WithJobs(4), WithRetries(1))
	if err == nil {
		t.Fatal("pull of a manifest with swapped ranges succeeded")
	}
	if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), "w.orkpack range ") || !strings.Contains(err.Error(), "chaining value") {
		t.Errorf("error %q: want ErrDigestMismatch naming a range of w.orkpack and its chaining value", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "w.orkpack")); !os.IsNotExist(err) {
		t.Errorf("w.orkpack appeared in the destination although its pull failed (err %v)", err)
	}
}
