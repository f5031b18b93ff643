package stages

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/artifacts"
)

// TestSHA256FileSparse: a file with holes (at the start, inside, at the end) hashes as its logical
// bytes, holes being zeros, whatever the hole boundaries are.
func TestSHA256FileSparse(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		size   int64
		writes map[int64]int // offset -> length of data written there (the rest are holes)
	}{
		{"empty", 0, nil},
		{"all hole", 5<<20 + 3, nil},
		{"dense", 3<<20 + 17, map[int64]int{0: 3<<20 + 17}},
		{"hole data hole", 9 << 20, map[int64]int{4 << 20: 1<<20 + 5}},
		{"data hole data", 9<<20 + 1, map[int64]int{0: 100, 8 << 20: 1<<20 + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := make([]byte, tc.size)
			path := filepath.Join(dir, tc.name)
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			for off, n := range tc.writes {
				b := bytes.Repeat([]byte{byte(off>>20) + 1, 7, 9}, n/3+1)[:n]
				copy(want[off:], b)
				if _, err := f.WriteAt(b, off); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Truncate(tc.size); err != nil {
				t.Fatal(err)
			}
			f.Close()
			sum := sha256.Sum256(want)
			got, err := sha256File(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			if got != hex.EncodeToString(sum[:]) {
				t.Errorf("sha256 %s, want %x", got, sum)
			}
		})
	}
}

// TestReadSHA256: a sha256 node's record is taken only for the file it describes (same BLAKE3 and
// size); one of another file, or malformed, is an error naming the record.
func TestReadSHA256(t *testing.T) {
	dir := t.TempDir()
	data := []byte("the subject")
	path := filepath.Join(dir, "subject")
	if err := os.WriteFile(path, data, 0o444); err != nil {
		t.Fatal(err)
	}
	f := File{Path: path, Digest: artifacts.SumBytes(data), Size: int64(len(data))}
	out := t.TempDir()
	if err := runSHA256(context.Background(), SHA256Params{}, Request{Inputs: map[string]File{"file": f}, OutDir: out}); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(out, "sha256.json")
	sum := sha256.Sum256(data)
	if got, err := readSHA256(rec, f); err != nil || got != hex.EncodeToString(sum[:]) {
		t.Fatalf("readSHA256 = %q, %v; want %x", got, err, sum)
	}
	other := f
	other.Digest = artifacts.SumBytes([]byte("another file"))
	short := f
	short.Size--
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"sha256":"00"`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rec string
		f   File
	}{{rec, other}, {rec, short}, {bad, f}} {
		if _, err := readSHA256(tc.rec, tc.f); err == nil || !strings.Contains(err.Error(), tc.rec) {
			t.Errorf("readSHA256(%s, %s/%d) = %v, want an error naming the record", tc.rec, tc.f.Digest, tc.f.Size, err)
		}
	}
}

// TestProvenanceModelParams: the model description is written as externalParameters.model with the
// recipe file's BLAKE3 (dependency "recipe") added; without that dependency it has no recipe; a
// recipe given as a parameter is refused (the stage records the file's digest itself).
func TestProvenanceModelParams(t *testing.T) {
	dir := t.TempDir()
	subject, recipe := filepath.Join(dir, "x.orkpack"), filepath.Join(dir, "r.yaml")
	os.WriteFile(subject, []byte("pack bytes"), 0o444)
	os.WriteFile(recipe, []byte("name: r\n"), 0o444)
	file := func(p string) File {
		b, _ := os.ReadFile(p)
		return File{Path: p, Digest: artifacts.SumBytes(b), Size: int64(len(b))}
	}
	model := &ProvenanceModel{Name: "m", Architecture: "qwen35", ParamSize: "27B", Precision: "int4", Quantization: "gptq", BoardProfile: "rk3588"}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]File{"orkpipe": {Path: exe, Digest: artifacts.SumBytes([]byte("binary")), Size: 6}} // recorded, not checked here
	for _, tc := range []struct {
		name       string
		deps       []ProvenanceDep
		inputs     map[string]File
		wantRecipe string
	}{
		{"with the recipe file", []ProvenanceDep{{Name: "recipe", URI: "file://" + recipe}}, map[string]File{"dep.recipe": file(recipe)}, file(recipe).Digest.String()},
		{"without", nil, map[string]File{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := map[string]File{"subject.x.orkpack": file(subject)}
			for k, v := range tc.inputs {
				in[k] = v
			}
			out := t.TempDir()
			p := ProvenanceParams{Name: "r", Subjects: []string{"x.orkpack"}, Deps: tc.deps, Recipe: []byte(`{}`), Model: model}
			if err := runProvenance(context.Background(), p, Request{Inputs: in, OutDir: out, Tools: tools}); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(out, "provenance.json"))
			if err != nil {
				t.Fatal(err)
			}
			var st struct {
				Predicate struct {
					BuildDefinition struct {
						ExternalParameters struct{ Model ProvenanceModel } `json:"externalParameters"`
					} `json:"buildDefinition"`
				} `json:"predicate"`
			}
			if err := json.Unmarshal(b, &st); err != nil {
				t.Fatal(err)
			}
			want := *model
			want.Recipe = tc.wantRecipe
			if got := st.Predicate.BuildDefinition.ExternalParameters.Model; got != want {
				t.Errorf("externalParameters.model = %+v, want %+v", got, want)
			}
		})
	}
	k, err := Lookup("provenance")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(ProvenanceParams{Name: "r", Subjects: []string{"x"}, Model: &ProvenanceModel{Recipe: "blake3:00"}})
	if _, err := k.Bind(raw); err == nil || !strings.Contains(err.Error(), "model.recipe") {
		t.Errorf("a recipe digest given as a parameter: %v, want an error naming model.recipe", err)
	}
}
