package depcheck

import (
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "orkpipe"

// load lists every package of the module with its imports and its tests' imports (go list), and the
// repository's top-level folders. It also reads every folder and stats every Go file of the tree, so
// that go test's cache, which does not see what go list reads, re-runs the check when any of them
// changes.
func load(t *testing.T) ([]Package, []string) {
	t.Helper()
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	dir := strings.TrimSpace(string(root))
	var top []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if filepath.Dir(path) == dir {
				top = append(top, d.Name())
			}
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			_, err = os.Stat(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	top = slices.DeleteFunc(top, func(name string) bool { return gitIgnores(dir, name) })
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", module+"/...")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, Package{Path: p.ImportPath, Imports: p.Imports, TestImports: append(p.TestImports, p.XTestImports...)})
	}
	return pkgs, top
}

// gitIgnores reports whether git ignores the top-level folder name of the checkout at dir (the build
// outputs the README's main job writes, orkpipe-out/, are no folder of the layout). Outside a git
// checkout, or without git, nothing is ignored.
func gitIgnores(dir, name string) bool {
	cmd := exec.Command("git", "check-ignore", "-q", name+"/")
	cmd.Dir = dir
	return cmd.Run() == nil
}

// TestImportGraph checks the module as it is: every package, its tests, every top-level folder.
func TestImportGraph(t *testing.T) {
	pkgs, top := load(t)
	if len(pkgs) < 30 || !slices.Contains(top, "ork") {
		t.Fatalf("go list found %d packages, top-level folders %v: not the orkpipe tree", len(pkgs), top)
	}
	for _, v := range Check(module, pkgs, top) {
		t.Error(v)
	}
}

// TestCheckCatches runs the checker over synthetic package graphs: the allowed graph passes, and each
// deliberate breach of the table is reported naming the package and the import.
func TestCheckCatches(t *testing.T) {
	m := func(rel ...string) []string {
		var out []string
		for _, r := range rel {
			out = append(out, module+"/"+r)
		}
		return out
	}
	good := []Package{
		{Path: module + "/cmd/orkpipe", Imports: append(m("pipelines/build", "registry", "internal/units"), "github.com/spf13/cobra", "fmt"),
			TestImports: m("internal/fixtures", "pipelines/verify/verifytest", "cmd/orkpipe")},
		{Path: module + "/bench", Imports: m("stages", "artifacts", "internal/blascore", "registry/regtest")},
		{Path: module + "/pipelines/build", Imports: m("pipelines/engine", "stages", "registry", "ork/board", "internal/flock")},
		{Path: module + "/pipelines/verify/verifytest", Imports: m("internal/fixtures", "internal/testfiles", "ork/pack")},
		{Path: module + "/stages", Imports: m("artifacts", "ork/quant"), TestImports: m("internal/fixtures", "internal/testfiles")},
		{Path: module + "/registry", Imports: m("registry/oci", "artifacts", "ork/pack", "internal/flock"), TestImports: m("registry/regtest", "internal/testfiles")},
		{Path: module + "/registry/cacherepo", Imports: m("registry/oci", "artifacts"), TestImports: m("registry/regtest", "internal/testfiles")},
		{Path: module + "/registry/oci", Imports: m("internal/flock"), TestImports: m("registry/regtest")},
		{Path: module + "/internal/flock", Imports: []string{"golang.org/x/sys/unix"}, TestImports: []string{"golang.org/x/sys/unix"}},
		{Path: module + "/registry/regtest", Imports: append(m("internal/testfiles"), "github.com/distribution/distribution/v3", "testing")},
		{Path: module + "/artifacts", Imports: append(m("internal/units", "internal/flock"), "github.com/zeebo/blake3", "golang.org/x/sys/unix", "C")},
		{Path: module + "/ork/internal/durable", Imports: m("internal/flock")},
		{Path: module + "/ork/pack", Imports: append(m("ork/tile", "ork/internal/durable"), "github.com/zeebo/blake3"), TestImports: m("ork/board", "internal/testfiles")},
		{Path: module + "/internal/fixtures", Imports: m("stages", "ork/pack", "internal/testfiles")},
		{Path: module + "/internal/buildinfo", Imports: m("artifacts")},
		{Path: module + "/cmd/orkpipe-dagger", Imports: append(m("pipelines/daggerexec", "internal/buildinfo"), "flag")},
		{Path: module + "/pipelines/daggerexec", Imports: append(m("artifacts"), "dagger.io/dagger")},
		{Path: module + "/internal/blake3x", Imports: []string{"golang.org/x/sys/cpu"}, TestImports: m("internal/testfiles")},
		{Path: module + "/internal/avx2host"},
		{Path: module + "/internal/avx2host/dgemm", TestImports: m("internal/crosstest")},
		{Path: module + "/internal/arm64host"},
		{Path: module + "/internal/arm64host/binary", TestImports: m("internal/testfiles", "internal/crosstest", "registry/regtest")},
		{Path: module + "/internal/arm64host/ork", TestImports: m("internal/testfiles", "internal/crosstest")},
		{Path: module + "/internal/crosstest", Imports: m("internal/testfiles")},
	}
	top := []string{".ci", ".dagger", ".git", "artifacts", "bench", "cmd", "docs", "internal", "ork", "pipelines", "registry", "stages"}
	if v := Check(module, good, top); v != nil {
		t.Fatalf("the allowed graph: %q", v)
	}
	tests := []struct {
		name string
		pkg  Package
		top  string
		want string
	}{
		{name: "ork imports stages (upward)", pkg: Package{Path: module + "/ork/pack", Imports: m("stages")}, want: "orkpipe/ork/pack imports orkpipe/stages (ork is the domain library"},
		{name: "ork imports a shared internal helper", pkg: Package{Path: module + "/ork/quant", Imports: m("internal/units")}, want: "orkpipe/ork/quant imports orkpipe/internal/units"},
		{name: "artifacts imports ork", pkg: Package{Path: module + "/artifacts", Imports: m("ork/pack")}, want: "orkpipe/artifacts imports orkpipe/ork/pack"},
		{name: "artifacts imports a library", pkg: Package{Path: module + "/artifacts", Imports: []string{"github.com/google/go-containerregistry/pkg/v1"}}, want: "artifacts imports third-party github.com/google/go-containerregistry/pkg/v1"},
		{name: "stages imports pipelines", pkg: Package{Path: module + "/stages", Imports: m("pipelines/engine")}, want: "orkpipe/stages imports orkpipe/pipelines/engine"},
		{name: "registry imports stages", pkg: Package{Path: module + "/registry", Imports: m("stages")}, want: "orkpipe/registry imports orkpipe/stages"},
		{name: "the OCI client imports artifacts", pkg: Package{Path: module + "/registry/oci", Imports: m("artifacts")}, want: "orkpipe/registry/oci imports orkpipe/artifacts"},
		{name: "the cache store imports registry", pkg: Package{Path: module + "/registry/cacherepo", Imports: m("registry")}, want: "orkpipe/registry/cacherepo imports orkpipe/registry"},
		{name: "pipelines imports cmd", pkg: Package{Path: module + "/pipelines/build", Imports: m("cmd/orkpipe")}, want: "orkpipe/pipelines/build imports orkpipe/cmd/orkpipe"},
		{name: "bench imports cmd", pkg: Package{Path: module + "/bench", Imports: m("cmd/orkpipe")}, want: "orkpipe/bench imports orkpipe/cmd/orkpipe"},
		{name: "a test of ork imports stages", pkg: Package{Path: module + "/ork/model", TestImports: m("stages")}, want: "orkpipe/ork/model test code imports orkpipe/stages"},
		{name: "a test of ork imports fixtures", pkg: Package{Path: module + "/ork/calib", TestImports: m("internal/fixtures")}, want: "orkpipe/ork/calib test code imports orkpipe/internal/fixtures"},
		{name: "shipping code imports fixtures", pkg: Package{Path: module + "/pipelines/build", Imports: m("internal/fixtures")}, want: "orkpipe/pipelines/build imports the test helper orkpipe/internal/fixtures: only tests may"},
		{name: "shipping code imports verifytest", pkg: Package{Path: module + "/cmd/orkpipe", Imports: m("pipelines/verify/verifytest")}, want: "orkpipe/cmd/orkpipe imports the test helper orkpipe/pipelines/verify/verifytest"},
		{name: "shipping code imports crosstest", pkg: Package{Path: module + "/registry", Imports: m("internal/crosstest")}, want: "orkpipe/registry imports the test helper orkpipe/internal/crosstest: only tests may"},
		{name: "shipping code imports testfiles", pkg: Package{Path: module + "/internal/hugebuf", Imports: m("internal/testfiles")}, want: "orkpipe/internal/hugebuf imports the test helper orkpipe/internal/testfiles: only tests may"},
		{name: "a leaf's test imports fixtures", pkg: Package{Path: module + "/internal/blake3x", TestImports: m("internal/fixtures")}, want: "orkpipe/internal/blake3x test code imports orkpipe/internal/fixtures"},
		{name: "the flock leaf imports the module", pkg: Package{Path: module + "/internal/flock", Imports: m("internal/units")}, want: "orkpipe/internal/flock imports orkpipe/internal/units"},
		{name: "the flock leaf imports a library", pkg: Package{Path: module + "/internal/flock", Imports: []string{"github.com/zeebo/blake3"}}, want: "orkpipe/internal/flock imports third-party github.com/zeebo/blake3"},
		{name: "the OCI client imports a leaf other than flock", pkg: Package{Path: module + "/registry/oci", Imports: m("internal/units")}, want: "orkpipe/registry/oci imports orkpipe/internal/units"},
		{name: "an internal helper imports upward", pkg: Package{Path: module + "/internal/units", Imports: m("artifacts")}, want: "orkpipe/internal/units imports orkpipe/artifacts"},
		{name: "an unknown internal package", pkg: Package{Path: module + "/internal/misc"}, want: "orkpipe/internal/misc is in no row of the layout table"},
		{name: "an unknown package under cmd", pkg: Package{Path: module + "/cmd/other"}, want: "orkpipe/cmd/other is in no row of the layout table"},
		{name: "an import of an unknown package", pkg: Package{Path: module + "/stages", Imports: m("tools/gen")}, want: "orkpipe/stages imports orkpipe/tools/gen, which is in no row"},
		{name: "a package in docs", pkg: Package{Path: module + "/docs/examples"}, want: "orkpipe/docs/examples is in no row"},
		{name: "an unknown top-level folder", top: "tools", want: "top-level folder tools/ is in no row of the layout table"},
		{name: "the CLI links the Dagger SDK", pkg: Package{Path: module + "/pipelines/build", Imports: []string{"dagger.io/dagger"}},
			want: "orkpipe/cmd/orkpipe links dagger.io/dagger (imported by orkpipe/pipelines/build)"},
		{name: "the CLI links grpc", pkg: Package{Path: module + "/cmd/orkpipe", Imports: []string{"google.golang.org/grpc/codes"}},
			want: "orkpipe/cmd/orkpipe links google.golang.org/grpc/codes (imported by orkpipe/cmd/orkpipe)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pkgs, folders := good, top
			if tc.pkg.Path != "" {
				pkgs = append(slices.Clone(good), tc.pkg)
			}
			if tc.top != "" {
				folders = append(slices.Clone(top), tc.top)
			}
			v := Check(module, pkgs, folders)
			if len(v) != 1 || !strings.Contains(v[0], tc.want) {
				t.Fatalf("violations %q, want exactly one saying %q", v, tc.want)
			}
		})
	}
}
