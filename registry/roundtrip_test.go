package registry

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"orkpipe/ork/pack"
	"orkpipe/registry/regtest"
)

func TestPushPullRoundTrip(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := buildDir(t)
	ref := reg.Ref("packs/stories", "v1")

	res, err := Push(ctx, src, ref, plain(reg), testRange, WithJobs(3), WithAnnotator(PackAnnotator))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Artifact.Files) != 8 || len(res.Artifact.Manifest.Layers) != 8 {
		t.Fatalf("pushed %d files in %d layers, want 8 in 8", len(res.Artifact.Files), len(res.Artifact.Manifest.Layers))
	}
	pk, _ := res.Artifact.File("model.orkpack")
	if pk.Extra[AnnotationPackVersion] != strconv.FormatUint(uint64(pack.Version), 10) || pk.Extra[AnnotationPackEntries] != "2" || pk.Extra[AnnotationPackBoard] != "rk3588" {
		t.Errorf("pack annotations: %v", pk.Extra)
	}
	stub, _ := res.Artifact.File("model.orkpack.gguf")
	if stub.DataSize() >= stub.Digests.Size/8 {
		t.Errorf("stub: %d data bytes travel for a %d-byte sparse file", stub.DataSize(), stub.Digests.Size)
	}
	want := map[string]string{ // the form each file must travel in, and why
		"calib.txt":             "application/vnd.cncf.model.doc.v1.tar+zstd",    // compresses by far more than 1 MiB
		"model.orkpack":         "application/vnd.cncf.model.weight.v1.raw",      // int4 codes: nothing to gain
		"model.orkpack.gguf":    "application/vnd.cncf.model.weight.v1.tar",      // 64 MiB, under 1 MiB of data: holes left out
		"provenance.json":       "application/vnd.cncf.model.doc.v1.raw",         // compresses, but saves far less than 1 MiB
		"report.json":           "application/vnd.cncf.model.doc.v1.raw",         // likewise
		"sparse-text.gguf":      "application/vnd.cncf.model.weight.v1.tar+zstd", // holes and compressible data
		"stories260K-Q4_0.gguf": "application/vnd.cncf.model.weight.v1.raw",
		"stories260K.gguf":      "application/vnd.cncf.model.weight.v1.raw",
	}
	for i, f := range res.Artifact.Files {
		l := res.Artifact.Manifest.Layers[i]
		t.Logf("%-22s size %9d data %8d stored %8d ranges %2d %s", f.Name, f.Digests.Size, f.DataSize(), f.StoredSize(), len(f.Ranges), l.MediaType)
		if string(l.MediaType) != want[f.Name] {
			t.Errorf("%s: media type %s, want %s", f.Name, l.MediaType, want[f.Name])
		}
		if l.Annotations[AnnotationFilepath] != f.Name || l.Annotations[AnnotationTitle] != f.Title() {
			t.Errorf("%s: filepath %q title %q", f.Name, l.Annotations[AnnotationFilepath], l.Annotations[AnnotationTitle])
		}
		if wantRanges := int((f.Digests.Size + MinRangeSize - 1) / MinRangeSize); len(f.Ranges) != max(wantRanges, 1) {
			t.Errorf("%s: %d ranges, want %d", f.Name, len(f.Ranges), wantRanges)
		}
	}
	sparseText, _ := res.Artifact.File("sparse-text.gguf")
	if sparseText.StoredSize() >= sparseText.DataSize()/2 {
		t.Errorf("sparse-text.gguf: %d bytes stored for %d bytes of text", sparseText.StoredSize(), sparseText.DataSize())
	}

	// WithFiles fetches only the named files (verified like the others); a name the artifact does not
	// have is refused before anything is written.
	one := filepath.Join(t.TempDir(), "one")
	pr1, err := Pull(ctx, ref, one, plain(reg), WithFiles("report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(one); len(ents) != 1 || ents[0].Name() != "report.json" || len(pr1.Files) != 1 ||
		sha256File(t, filepath.Join(one, "report.json")) != sha256File(t, filepath.Join(src, "report.json")) {
		t.Errorf("pull of report.json alone: %v, files %+v", ents, pr1.Files)
	}
	none := filepath.Join(t.TempDir(), "none")
	if _, err := Pull(ctx, ref, none, plain(reg), WithFiles("report.json", "missing.txt")); !errors.Is(err, ErrNoFile) || !strings.Contains(err.Error(), "missing.txt") {
		t.Errorf("pull of a missing file: %v, want ErrNoFile naming it", err)
	}
	noPulledFiles(t, none)

	dst := filepath.Join(t.TempDir(), "out")
	pr, err := Pull(ctx, ref, dst, plain(reg), WithJobs(4))
	if err != nil {
		t.Fatal(err)
	}
	if pr.Digest != res.Digest {
		t.Fatalf("pulled %s, pushed %s", pr.Digest, res.Digest)
	}
	sameFiles(t, src, dst)
	pulledClips(t, filepath.Join(dst, "model.orkpack"), map[string]float32{"blk.0.attn_q.weight": 1, "blk.0.attn_output.weight": 0.8125})
	for _, name := range []string{"model.orkpack.gguf", "sparse-text.gguf", "calib.txt"} {
		srcBlocks, dstBlocks := blocks(t, filepath.Join(src, name)), blocks(t, filepath.Join(dst, name))
		t.Logf("%s: blocks: source %d, pulled %d", name, srcBlocks, dstBlocks)
		if dstBlocks != srcBlocks {
			t.Errorf("%s: pulled with %d blocks allocated, the source has %d: holes not recreated", name, dstBlocks, srcBlocks)
		}
	}

	// A second pull finds every file present, checks its digests and downloads nothing.
	pr2, err := Pull(ctx, ref, dst, plain(reg))
	if err != nil {
		t.Fatal(err)
	}
	if pr2.Downloaded != 0 {
		t.Errorf("re-pull downloaded %d bytes, want 0", pr2.Downloaded)
	}
	for _, f := range pr2.Files {
		if !f.Skipped {
			t.Errorf("%s: not skipped on re-pull", f.Name)
		}
	}

	// A present file with different content (same size) is not skipped and not overwritten.
	p := filepath.Join(dst, "report.json")
	b, _ := os.ReadFile(p)
	b[10] ^= 1
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(ctx, ref, dst, plain(reg)); err == nil || !strings.Contains(err.Error(), "report.json") {
		t.Fatalf("pull over a changed report.json: err %v, want ErrExists naming it", err)
	}
	if got, _ := os.ReadFile(p); string(got) != string(b) {
		t.Fatal("changed file was overwritten without force")
	}
	if _, err := Pull(ctx, ref, dst, plain(reg), WithForce()); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, src, dst)
}

func TestTLSByDefault(t *testing.T) {
	reg := regtest.Start(t, nil)
	_, err := Pull(ctxT(t), reg.Ref("packs/x", "v1"), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "plain HTTP") && !strings.Contains(err.Error(), "http: server gave HTTP response to HTTPS client") {
		t.Fatalf("pull from a plain-HTTP registry without --plain-http: err %v, want a refusal", err)
	}
}

func TestSameBuildSameDigest(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	reg2 := regtest.Start(t, nil)
	src := buildDir(t)
	a, err := Push(ctx, src, reg.Ref("packs/a", "v1"), plain(reg), testRange)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Push(ctx, src, reg.Ref("packs/a", "v2"), plain(reg), testRange, WithJobs(1))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Push(ctx, src, reg2.Ref("other/repo", "latest"), WithPlainHTTP(reg2.Host), testRange, WithJobs(7))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("digests: %s %s %s (second push uploaded %d bytes, reused %d)", a.Digest, b.Digest, c.Digest, b.Uploaded, b.Reused)
	if a.Digest != b.Digest || a.Digest != c.Digest {
		t.Fatalf("same build, different manifest digests: %s %s %s", a.Digest, b.Digest, c.Digest)
	}
	if b.Uploaded != 0 {
		t.Errorf("second push to the same repository uploaded %d bytes, want 0", b.Uploaded)
	}
	// A different range size is a different layout, hence a different digest: the digest is not a constant.
	d, err := Push(ctx, src, reg.Ref("packs/a", "v3"), plain(reg), WithRangeSize(2*MinRangeSize))
	if err != nil {
		t.Fatal(err)
	}
	if d.Digest == a.Digest {
		t.Fatal("different range size gave the same manifest digest")
	}
}

func TestEmptyAndHoleOnlyFiles(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "empty.bin"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(src, "empty.bin"), 0); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(src, "holes.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(8 << 20)
	f.Close()
	ref := reg.Ref("packs/empty", "v1")
	if _, err := Push(ctx, src, ref, plain(reg), WithCreated(testCreated)); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := Pull(ctx, ref, dst, plain(reg)); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, src, dst)
	if b := blocks(t, filepath.Join(dst, "holes.gguf")); b != 0 {
		t.Errorf("hole-only file pulled with %d blocks, want 0", b)
	}
	// Without a recorded build time the manifest carries none (never the wall clock): it is the
	// same for every push of the same files.
	a, err := Push(ctx, src, reg.Ref("packs/empty", "v2"), plain(reg))
	if err != nil {
		t.Fatalf("push without provenance or created time: %v", err)
	}
	b, err := Push(ctx, src, reg.Ref("packs/empty", "v3"), plain(reg))
	if err != nil || a.Digest != b.Digest {
		t.Fatalf("two pushes without a build time: %v, digests %s and %s", err, a.Digest, b.Digest)
	}
	if _, ok := a.Artifact.Annotations[AnnotationCreated]; ok {
		t.Errorf("manifest without a build time has %s = %q", AnnotationCreated, a.Artifact.Annotations[AnnotationCreated])
	}
}

// pulledClips opens a pulled pack and checks its entries' activation clips.
func pulledClips(t *testing.T, path string, want map[string]float32) {
	t.Helper()
	r, err := pack.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.VerifyAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	for name, c := range want {
		e, err := r.Entry(name)
		if err != nil || e.ActClip != c {
			t.Fatalf("pulled pack %s: entry %s activation clip %v (%v), want %v", path, name, e.ActClip, err, c)
		}
	}
}
