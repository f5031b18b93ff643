package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/zeebo/blake3"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/board"
	"orkpipe/ork/pack"
	"orkpipe/registry/regtest"
)

// testCreated is the build time written into test provenance.
var testCreated = time.Date(2026, 11, 2, 10, 30, 0, 0, time.UTC)

// copyFile copies src to dst (a test scratch copy of shared test data, never into the repository).
func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	writeFrom(t, dst, in)
}

// writeFrom writes what r yields to a new file at path.
func writeFrom(t testing.TB, path string, r io.Reader) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, r); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// makeSparseStub writes dst as a sparse "stub": the first headerLen bytes of src (a GGUF header and
// tensor table), then src's tensor data with every other 64 KiB block left as a hole, then a hole up
// to size, then the last 4 KiB of src at the very end. It returns the number of data bytes written.
func makeSparseStub(t testing.TB, src, dst string, headerLen, size int64) int64 {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	var data int64
	write := func(p []byte, off int64) {
		if _, err := f.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		data += int64(len(p))
	}
	write(b[:headerLen], 0)
	const blk = 64 << 10
	start := (headerLen + 4095) &^ 4095
	for off, i := start, 0; off < int64(len(b)); off, i = off+blk, i+1 {
		if i%2 == 1 {
			continue // a hole: a "pack-owned tensor"
		}
		write(b[off:min(off+blk, int64(len(b)))], off)
	}
	write(b[len(b)-4096:], size-4096)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return data
}

// writeProvenance writes a SLSA v1 provenance statement into dir.
func writeProvenance(t testing.TB, dir string) {
	t.Helper()
	writeProvenanceModel(t, dir, ModelInfo{Name: "stories260K", Version: "1", Architecture: "llama", ParamSize: "292800", Precision: "int4", Quantization: "rtn-g32", BoardProfile: "rk3588-16dom"})
}

// writeProvenanceModel is writeProvenance with model as externalParameters.model.
func writeProvenanceModel(t testing.TB, dir string, model ModelInfo) {
	t.Helper()
	pred := map[string]any{
		"buildDefinition": map[string]any{
			"buildType": "https://orkpipe.dev/build/v1",
			"externalParameters": map[string]any{
				"model": model,
			},
		},
		"runDetails": map[string]any{
			"builder":  map[string]any{"id": "https://orkpipe.dev/builder/test"},
			"metadata": map[string]any{"invocationId": "test", "startedOn": testCreated.Add(-time.Minute), "finishedOn": testCreated},
		},
	}
	pb, _ := json.Marshal(pred)
	st := Statement{Type: StatementTypeV1, PredicateType: PredicateSLSAProvenance, Predicate: pb,
		Subject: []Subject{{Name: "model.orkpack", Digest: map[string]string{"sha256": strings.Repeat("0", 64)}}}}
	b, _ := json.MarshalIndent(st, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, ProvenanceFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writePack writes a real orkpack (ork/pack, planned for the rk3588) with two I4_NATIVE weights
// whose int4 codes are taken from the bytes of src.
func writePack(t testing.TB, src, dst string) {
	t.Helper()
	ctx := context.Background()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pack.Create(ctx, dst, board.Planner(board.RK3588()))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const k, n = 64, 64
	for i, name := range []string{"blk.0.attn_q.weight", "blk.0.attn_output.weight"} {
		codes := make([]int8, k*n)
		for j := range codes {
			codes[j] = int8(b[14176+i*k*n+j]%16) - 8
		}
		scales := make([]float32, n)
		for j := range scales {
			scales[j] = 0.01 + float32(j)/1000
		}
		meta := pack.Meta{Name: name, DType: pack.I4Native, K: k, N: n, QErr: 0.05, Source: blake3.Sum256(b[14176+i*k*n : 14176+(i+1)*k*n])}
		if i == 1 {
			meta.ActClip = 0.8125 // a clipped entry: the round trip keeps the pack's activation clips
		}
		if err := w.Add(ctx, pack.Weight{Meta: meta, Codes: codes, Scales: scales}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// writeText writes a compressible text file (words from a small vocabulary, pseudo-random order):
// the given data extents of a file of size bytes, the rest left as holes.
func writeText(t testing.TB, path string, size int64, exts []Extent, seed uint64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	words := strings.Fields("the little model quantized its weights and the board ran them fast and well once upon a time")
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, e := range exts {
		var b bytes.Buffer
		for int64(b.Len()) < e.Len {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(" \n"[rng.IntN(2)])
		}
		if _, err := f.WriteAt(b.Bytes()[:e.Len], e.Off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// buildDir makes a build output directory from the shared stories260K files: the F32 GGUF, the
// Q4_0 GGUF (an int4 payload), a real orkpack, a sparse stub, report.json and provenance.json
// (raw and tar layers), plus two compressible files (tar+zstd layers): calib.txt (6 MiB of text,
// two 4 MiB ranges) and sparse-text.gguf (24 MiB, three text extents between holes: a PAX-sparse
// archive in six ranges, some of holes only).
func buildDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	writeText(t, filepath.Join(dir, "calib.txt"), 6<<20, []Extent{{Off: 0, Len: 6 << 20}}, 1)
	writeText(t, filepath.Join(dir, "sparse-text.gguf"), 24<<20, []Extent{{Off: 0, Len: 1 << 20}, {Off: 9<<20 + 4096, Len: 2 << 20}, {Off: 24<<20 - 8192, Len: 8192}}, 2)
	copyFile(t, testfiles.Path(t, "stories260K.gguf"), filepath.Join(dir, "stories260K.gguf"))
	copyFile(t, testfiles.Path(t, "stories260K-Q4_0.gguf"), filepath.Join(dir, "stories260K-Q4_0.gguf"))
	writePack(t, testfiles.Path(t, "stories260K.gguf"), filepath.Join(dir, "model.orkpack"))
	makeSparseStub(t, testfiles.Path(t, "stories260K.gguf"), filepath.Join(dir, "model.orkpack.gguf"), 14176, 64<<20)
	report := []byte(`{"ppl": 2.6798, "kld": 0.06558, "model": "stories260K", "tensors": 48, "notes": "` + strings.Repeat("ok ", 200) + `"}`)
	if err := os.WriteFile(filepath.Join(dir, "report.json"), report, 0o644); err != nil {
		t.Fatal(err)
	}
	writeProvenance(t, dir)
	return dir
}

// writeRandom writes size pseudo-random (incompressible) bytes to path, streaming.
func writeRandom(t testing.TB, path string, size int64, seed uint64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	buf := make([]byte, 4<<20)
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		r.Read(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			t.Fatal(err)
		}
		left -= n
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func sha256File(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// blocks returns the 512-byte blocks allocated to path.
func blocks(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Blocks
}

// sameFiles asserts that every non-hidden file of src exists in dst, byte-identical and read-only.
func sameFiles(t testing.TB, src, dst string) {
	t.Helper()
	paths, err := listDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		q := filepath.Join(dst, filepath.Base(p))
		if a, b := sha256File(t, p), sha256File(t, q); a != b {
			t.Errorf("%s: sha256 %s, source %s", q, b, a)
		}
		st, err := os.Stat(q)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o444 {
			t.Errorf("%s: mode %v, want 0444", q, st.Mode().Perm())
		}
	}
	if _, err := os.Stat(filepath.Join(dst, PartialDir)); !os.IsNotExist(err) {
		t.Errorf("%s left behind after a complete pull (err %v)", PartialDir, err)
	}
}

// noPulledFiles asserts that dst holds nothing but (possibly) the partial-state directory.
func noPulledFiles(t testing.TB, dst string) {
	t.Helper()
	ents, err := os.ReadDir(dst)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != PartialDir {
			t.Errorf("%s appeared in the destination although the pull failed", e.Name())
		}
	}
}

func plain(r *regtest.Registry) Option { return WithPlainHTTP(r.Host) }

// testRange is the range size of the tests: the smallest, so that files of a few MiB have several.
var testRange = WithRangeSize(MinRangeSize)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// putRaw puts manifest bytes (as a tool other than orkpipe, or an attacker, would) at ref.
func putRaw(t testing.TB, ref string, raw []byte, mt types.MediaType) {
	t.Helper()
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(tag, rawManifest{raw, mt}); err != nil {
		t.Fatal(err)
	}
}

// rawManifest is a remote.Taggable for bytes a test serialized.
type rawManifest struct {
	raw []byte
	mt  types.MediaType
}

func (r rawManifest) RawManifest() ([]byte, error)        { return r.raw, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return r.mt, nil }
