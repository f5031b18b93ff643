// Package verifytest builds real build directories for tests of `orkpipe verify`: a pack of the
// real stories260K weights (ork/quant RTN, ork/pack writer, RK3588 plan), its stub (gguf.EmitStub),
// report.json recording the source header digest and provenance.json (in-toto Statement v1, SLSA
// provenance v1 predicate) with sha256 and BLAKE3 subjects — the layout `orkpipe build` leaves. It
// also locates the board-runtime stand-ins in pipelines/verify/testdata.
package verifytest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/zeebo/blake3"

	"orkpipe/artifacts"
	"orkpipe/internal/fixtures"
	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
	"orkpipe/registry"
)

// Name is the base name of the pack in a fixture directory.
const Name = "stories"

// BuildDir writes a build directory into dir (which must exist) and returns the pack's path. The
// pack owns every 2-D weight but token_embd (I4_NATIVE G32, ffn_down I8, attn_output I4_ROT_A8).
func BuildDir(t testing.TB, dir string) string {
	t.Helper()
	BuildDirWith(t, dir, nil)
	return filepath.Join(dir, Name+".orkpack")
}

// BuildDirWith is BuildDir with mutate called on each quantized weight before it is added (nil: none);
// the first weight for which it returns true is added pre-tiled (Writer.AddTiled), so that codes the
// quantizer never writes reach the pack with consistent hashes. It returns that weight's name.
func BuildDirWith(t testing.TB, dir string, mutate func(*pack.Weight) bool) string {
	t.Helper()
	ctx := context.Background()
	src, err := gguf.Open(ctx, testfiles.Path(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	packPath := filepath.Join(dir, Name+".orkpack")
	owned, mutated := WritePack(t, packPath, PackOptions{Mutate: mutate})
	if _, err := gguf.EmitStub(ctx, src, gguf.NewNameSet(owned...), packPath+".gguf"); err != nil {
		t.Fatal(err)
	}
	hd, err := src.HeaderDigest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	header, err := artifacts.DigestFromBytes(hd[:])
	if err != nil {
		t.Fatal(err)
	}
	report := map[string]any{"name": Name, "board": "rk3588", "verify": map[string]any{"stub_header": header.String()}}
	writeJSON(t, filepath.Join(dir, "report.json"), report)
	WriteProvenance(t, dir, Name+".orkpack", Name+".orkpack.gguf", "report.json")
	return mutated
}

// PackOptions vary the pack WritePack writes. The zero value is the fixture's pack.
type PackOptions struct {
	// Promote names one weight to store as I8_ROT (rotated int8) instead of its default dtype.
	Promote string
	// Skip names one weight to leave out of the pack.
	Skip string
	// Mutate is called on each quantized weight before it is added (nil: none); the first weight for
	// which it returns true is added pre-tiled (Writer.AddTiled).
	Mutate func(*pack.Weight) bool
}

// WritePack quantizes the matmul weights of the real stories260K.gguf (RTN) into an orkpack at path:
// every 2-D weight but token_embd, I4_NATIVE G32, except ffn_down I8 per channel and attn_output
// I4_ROT_A8 (rotated), varied by o. It returns the names of the weights stored and the name of the
// weight o.Mutate changed ("" if none).
func WritePack(t testing.TB, path string, o PackOptions) (owned []string, mutated string) {
	t.Helper()
	return fixtures.Pack(t, testfiles.Path(t, "stories260K.gguf"), path, func(name string) (fixtures.Tier, bool) {
		switch {
		case name == "token_embd.weight" || name == o.Skip:
			return fixtures.Tier{}, false
		case name == o.Promote:
			return fixtures.Tier{DType: pack.I8Rot, Seed: 7}, true
		case strings.Contains(name, "ffn_down"):
			return fixtures.Tier{DType: pack.I8}, true
		case strings.Contains(name, "attn_output"):
			return fixtures.Tier{DType: pack.I4RotA8, Group: 32, Seed: 7}, true
		}
		return fixtures.Tier{DType: pack.I4Native, Group: 32}, true
	}, o.Mutate)
}

// WriteProvenance (re)writes dir/provenance.json with the current sha256 and BLAKE3 of the named
// files of dir as subjects (used by tests that change a file and want only a later check to see it).
func WriteProvenance(t testing.TB, dir string, names ...string) {
	t.Helper()
	var subjects []map[string]any
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		sh, bh := sha256.New(), blake3.New()
		if _, err := io.Copy(io.MultiWriter(sh, bh), f); err != nil {
			t.Fatal(err)
		}
		f.Close()
		subjects = append(subjects, map[string]any{"name": n, "digest": map[string]string{
			"sha256": hex.EncodeToString(sh.Sum(nil)), "blake3": hex.EncodeToString(bh.Sum(nil))}})
	}
	st := map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       subjects,
		"predicateType": "https://slsa.dev/provenance/v1",
		"predicate": map[string]any{
			"buildDefinition": map[string]any{"buildType": "https://orkpipe.dev/slsa/recipe-build/v1",
				"externalParameters": map[string]any{"model": map[string]any{"name": Name, "boardProfile": "rk3588"}}},
			"runDetails": map[string]any{"metadata": map[string]any{"finishedOn": "2026-01-02T03:04:05Z"}},
		},
	}
	p := filepath.Join(dir, "provenance.json")
	os.Remove(p)
	writeJSON(t, p, st)
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// StandIn returns the absolute path of a board-runtime stand-in script, one of the set shared with
// ork/boardhost in ork/boardhost/testdata (see its README.md): "good", "rewrites-pack", "fails" or
// "hangs".
func StandIn(t testing.TB, name string) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate verifytest")
	}
	p := filepath.Join(filepath.Dir(file), "..", "..", "..", "ork", "boardhost", "testdata", "fake-llama-perplexity-"+name+".sh")
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// DecoyPredicate is the predicate type of the attestations AttachDecoys attaches.
const DecoyPredicate = "https://example.com/decoy/v1"

// AttachDecoys attaches n signed attestations of predicate type DecoyPredicate to the artifact at ref
// (opts: the transport options and registry.WithSigner): other attestations a board verification can
// be listed after.
func AttachDecoys(t testing.TB, ref string, n int, opts ...registry.Option) {
	t.Helper()
	for i := range n {
		if _, err := registry.Attach(context.Background(), ref, DecoyPredicate, json.RawMessage(fmt.Sprintf(`{"run":%d}`, i)), opts...); err != nil {
			t.Fatal(err)
		}
	}
}
