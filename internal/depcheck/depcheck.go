// Package depcheck keeps the import graph of DESIGN.md's layout table honest. Dependencies point down
// the table and never back up:
//
//	layer               may import (besides itself)
//	cmd/orkpipe         pipelines, stages, artifacts, registry (and registry/{oci,cacherepo}), ork, internal/{units,buildinfo,blascore,blake3x,hugebuf,flock,startheap};
//	                    never links the Dagger SDK, grpc or OpenTelemetry, not even through another package
//	cmd/orkpipe-dagger  pipelines, stages, artifacts, registry (and registry/{oci,cacherepo}), ork, internal/{units,buildinfo,blascore,blake3x,hugebuf,flock}
//	                    (the Dagger executor's process: the one command that links the Dagger SDK)
//	bench               pipelines, stages, artifacts, registry (and registry/{oci,cacherepo}), ork, internal/{units,buildinfo,blascore,blake3x,hugebuf,flock}
//	pipelines           stages, artifacts, registry (and registry/{oci,cacherepo}), ork, internal/{units,buildinfo,blascore,blake3x,hugebuf,flock}
//	stages              artifacts, ork, internal/{units,buildinfo,blascore,blake3x,hugebuf,flock}
//	registry            registry/oci, artifacts, ork, internal/{units,buildinfo,blake3x,hugebuf,flock}
//	registry/cacherepo  registry/oci, artifacts, internal/{blake3x,hugebuf,flock} (the remote build cache store)
//	registry/oci        internal/flock only (the OCI client)
//	registry/regtest    nothing of the module (test helper: a real registry)
//	artifacts           internal/{units,blake3x,hugebuf,flock}; third party: x/sys, blake3, zstd (klauspost/compress), cpuid
//	ork/...             ork siblings and internal/{blake3x,hugebuf,flock}; third party: blake3, gonum, x/sys, x/sync, x/exp, cpuid
//	internal/units      nothing of the module
//	internal/blake3x    nothing of the module (the BLAKE3 kernel under artifacts and ork); third party: blake3, x/sys
//	internal/hugebuf    nothing of the module (buffers in huge pages outside the Go heap); third party: x/sys
//	internal/flock      nothing of the module (the flock(2) idiom of every lock file); third party: x/sys
//	internal/buildinfo  artifacts, internal/{blake3x,hugebuf,flock}
//	internal/blascore   ork, internal/{blake3x,hugebuf,flock}
//	internal/startheap  nothing of the module (the start's huge-page advice: standard library only)
//	internal/depcheck   nothing of the module
//	internal/avx2host   nothing of the module, nor its packages (dgemm, forward, quant); their tests internal/crosstest
//	                    (the kernels' tests on a CPU without AVX-512)
//	internal/arm64host  nothing of the module, nor its packages (binary, ork, store); their tests internal/crosstest,
//	                    registry/regtest (the board host's linux/arm64 binary and packages' tests under qemu-aarch64)
//	internal/crosstest  internal/testfiles (test helper: packages' tests built for another machine and run there)
//	internal/testfiles  nothing of the module (test helper)
//	internal/fixtures   stages, artifacts, ork, internal/{testfiles,blake3x,hugebuf,flock} (test helper)
//
// Test code (a package's _test.go files, both the package's own and its _test package) and test helpers
// may import what their layer may, and internal/testfiles (every layer's: its skip classes are how any
// test skips); those of stages, pipelines, bench and cmd also internal/fixtures; those of the registry
// packages, pipelines, bench and cmd also registry/regtest. A test-helper package (the three internal
// ones above, and pipelines/verify/verifytest, pipelines/engine/executortest, registry/regtest) may be
// imported only by test code, by another test helper or by the bench harness, never by the code that
// ships. Every top-level folder of the repository must be one of the layers or a known folder without
// Go packages of this module (docs, .ci, .dagger: the Dagger module is its own Go module, as is
// internal/testregistry); every package must belong to a layer: a new folder is a failure until the
// table (and DESIGN.md) says where it sits.
//
// The rules are checked on direct imports; since every row's list is closed under the rows it names,
// that bounds the transitive graph too. Third-party limits apply to the code that ships, not to tests.
// A row's unlinked prefixes are checked through the module's packages it reaches (non-test imports):
// none of them may import such a path. They keep what a binary pays for at every start out of it.
//
// It also keeps every test's skip in a class (internal/testfiles: the CPU, the build, -short, the long
// tests, an optional tool, a helper process, or what CI must provide): RawSkips finds the calls of
// testing's Skip, Skipf and SkipNow anywhere else, and TestNoRawSkips fails on each.
package depcheck

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Package is what the checker knows of one package of the module.
type Package struct {
	Path        string   // import path
	Imports     []string // of its non-test files
	TestImports []string // of its _test.go files (package P and package P_test)
}

// layer is one row of the table.
type layer struct {
	name        string   // the folder: the package itself or every package under it
	mayImport   []string // layers (row names) its code may import
	testImports []string // more rows its test code may import
	thirdParty  []string // module path prefixes its non-test code may import; nil means any
	useHelpers  bool     // its non-test code may import test helpers (the bench harness, never shipped)
	unlinked    []string // module path prefixes no package it reaches may import (the binary must not link them)
	why         string
}

var helpers = []string{"internal/testfiles", "internal/fixtures", "internal/crosstest", "pipelines/verify/verifytest", "pipelines/engine/executortest", "registry/regtest"}

// testfiles is the test helper every layer's test code (and every test helper) may import: the shared
// test data and the skip classes.
const testfiles = "internal/testfiles"

var layers = []layer{
	{name: "cmd/orkpipe", mayImport: []string{"pipelines", "stages", "artifacts", "registry", "registry/oci", "registry/cacherepo", "ork", "internal/units", "internal/buildinfo", "internal/blascore", "internal/blake3x", "internal/hugebuf", "internal/startheap", "internal/flock"},
		testImports: []string{"internal/fixtures", "registry/regtest"},
		unlinked:    []string{"dagger.io/", "google.golang.org/grpc", "go.opentelemetry.io/"},
		why:         "the CLI: everything below it; the Dagger SDK only through cmd/orkpipe-dagger (its ~200 packages cost every command's start)"},
	{name: "cmd/orkpipe-dagger", mayImport: []string{"pipelines", "stages", "artifacts", "registry", "registry/oci", "registry/cacherepo", "ork", "internal/units", "internal/buildinfo", "internal/blascore", "internal/blake3x", "internal/hugebuf", "internal/flock"},
		why: "the Dagger executor's process: everything below it"},
	{name: "bench", mayImport: []string{"pipelines", "stages", "artifacts", "registry", "registry/oci", "registry/cacherepo", "ork", "internal/units", "internal/buildinfo", "internal/blascore", "internal/blake3x", "internal/hugebuf", "internal/flock"},
		testImports: []string{"internal/fixtures", "registry/regtest"}, useHelpers: true, why: "the benchmark harness: everything below it"},
	{name: "pipelines", mayImport: []string{"stages", "artifacts", "registry", "registry/oci", "registry/cacherepo", "ork", "internal/units", "internal/buildinfo", "internal/blascore", "internal/blake3x", "internal/hugebuf", "internal/flock"},
		testImports: []string{"internal/fixtures", "registry/regtest"}, why: "pipelines: stages, artifacts, registry, ork"},
	{name: "stages", mayImport: []string{"artifacts", "ork", "internal/units", "internal/buildinfo", "internal/blascore", "internal/blake3x", "internal/hugebuf", "internal/flock"},
		testImports: []string{"internal/fixtures"}, why: "stages: artifacts and ork"},
	{name: "registry", mayImport: []string{"registry/oci", "artifacts", "ork", "internal/units", "internal/buildinfo", "internal/blake3x", "internal/hugebuf", "internal/flock"},
		testImports: []string{"registry/regtest"}, why: "registry: artifacts and ork"},
	{name: "registry/cacherepo", mayImport: []string{"registry/oci", "artifacts", "internal/blake3x", "internal/hugebuf", "internal/flock"},
		testImports: []string{"registry/regtest"}, why: "the remote build cache store: registry/oci and artifacts"},
	{name: "registry/oci", mayImport: []string{"internal/flock"}, testImports: []string{"registry/regtest"}, why: "the OCI client: no package of the module but the flock leaf"},
	{name: "registry/regtest", why: "a test helper: a real registry"},
	{name: "artifacts", mayImport: []string{"internal/units", "internal/blake3x", "internal/hugebuf", "internal/flock"},
		thirdParty: []string{"github.com/zeebo/blake3", "lukechampine.com/blake3", "github.com/klauspost/cpuid", "github.com/klauspost/compress", "golang.org/x/sys"},
		why:        "artifacts: the standard library, x/sys, blake3 and zstd only"},
	{name: "ork", mayImport: []string{"internal/blake3x", "internal/hugebuf", "internal/flock"},
		thirdParty: []string{"github.com/zeebo/blake3", "github.com/klauspost/cpuid", "gonum.org/v1/", "golang.org/x/sys", "golang.org/x/sync", "golang.org/x/exp"},
		why:        "ork is the domain library: only ork siblings, the shared BLAKE3 kernel and the flock idiom"},
	{name: "internal/units", why: "a leaf helper"},
	{name: "internal/blake3x", thirdParty: []string{"github.com/zeebo/blake3", "lukechampine.com/blake3", "golang.org/x/sys"},
		why: "the BLAKE3 kernel under artifacts and ork: no package of the module"},
	{name: "internal/hugebuf", thirdParty: []string{"golang.org/x/sys"},
		why: "large buffers in huge pages outside the Go heap: no package of the module"},
	{name: "internal/buildinfo", mayImport: []string{"artifacts", "internal/blake3x", "internal/hugebuf", "internal/flock"}, why: "build info: the binary's digest from artifacts"},
	{name: "internal/blascore", mayImport: []string{"ork", "internal/blake3x", "internal/hugebuf", "internal/flock"}, why: "BLAS kernel choice: ork/quant"},
	{name: "internal/flock", thirdParty: []string{"golang.org/x/sys"},
		why: "the flock(2) idiom of the lock files: no package of the module"},
	{name: "internal/startheap", why: "a leaf helper: the start's huge-page advice, standard library only"},
	{name: "internal/depcheck", why: "a leaf helper"},
	{name: "internal/avx2host", testImports: []string{"internal/crosstest"},
		why: "tests (internal/avx2host/dgemm, forward, quant): they build the kernel packages' tests and run them on a CPU without AVX-512, importing none of them"},
	{name: "internal/arm64host", testImports: []string{"internal/crosstest", "registry/regtest"},
		why: "tests (internal/arm64host/binary, ork, store): the board host's linux/arm64 binary and packages' tests under qemu-aarch64, importing none of them"},
	{name: "internal/crosstest", mayImport: []string{"internal/testfiles"}, why: "a test helper: packages' tests built for another machine"},
	{name: "internal/testfiles", why: "a test helper"},
	{name: "internal/fixtures", mayImport: []string{"stages", "artifacts", "ork", "internal/testfiles", "internal/blake3x", "internal/hugebuf", "internal/flock"}, why: "a test helper at the stages level"},
}

// folders are the top-level folders that hold no package of the module.
var folders = []string{"docs", ".ci", ".dagger", ".git"}

// layerOf returns the row rel (a module-relative package path) belongs to, or nil.
func layerOf(rel string) *layer {
	var best *layer
	for i := range layers {
		l := &layers[i]
		if (rel == l.name || strings.HasPrefix(rel, l.name+"/")) && (best == nil || len(l.name) > len(best.name)) {
			best = l
		}
	}
	return best
}

func isHelper(rel string) bool { return slices.Contains(helpers, rel) }

// standard reports whether an import path is the standard library's (or cgo's "C").
func standard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// Check returns every violation of the table by the packages of module (and by its top-level folders,
// topLevel: the names of the folders at the repository root), sorted. No violation: nil.
func Check(module string, pkgs []Package, topLevel []string) []string {
	var out []string
	bad := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	known := map[string]bool{}
	for _, l := range layers {
		first, _, _ := strings.Cut(l.name, "/")
		known[first] = true
	}
	for _, f := range topLevel {
		switch {
		case slices.Contains(folders, f):
		case known[f]:
		default:
			bad("top-level folder %s/ is in no row of the layout table (internal/depcheck, DESIGN.md)", f)
		}
	}
	rel := func(p string) (string, bool) {
		if p == module {
			return "", true
		}
		r, ok := strings.CutPrefix(p, module+"/")
		return r, ok
	}
	for _, p := range pkgs {
		r, _ := rel(p.Path)
		l := layerOf(r)
		if l == nil {
			bad("%s is in no row of the layout table (internal/depcheck, DESIGN.md)", p.Path)
			continue
		}
		first, _, _ := strings.Cut(r, "/")
		if slices.Contains(folders, first) {
			bad("%s is a package in %s/, a folder without packages of the module", p.Path, first)
		}
		check := func(imp string, test bool) {
			what := "imports"
			if test {
				what = "test code imports"
			}
			ir, inModule := rel(imp)
			if !inModule {
				if !test && !standard(imp) && l.thirdParty != nil && !hasPrefix(imp, l.thirdParty) {
					bad("%s imports third-party %s (%s)", p.Path, imp, l.why)
				}
				return
			}
			if isHelper(ir) && !test && !isHelper(r) && !l.useHelpers {
				bad("%s imports the test helper %s: only tests may", p.Path, imp)
				return
			}
			il := layerOf(ir)
			switch {
			case il == nil:
				bad("%s %s %s, which is in no row of the layout table", p.Path, what, imp)
			case il == l || slices.Contains(l.mayImport, il.name) ||
				(test || isHelper(r) || l.useHelpers) && (ir == testfiles || slices.Contains(l.testImports, il.name)):
			default:
				bad("%s %s %s (%s)", p.Path, what, imp, l.why)
			}
		}
		for _, imp := range p.Imports {
			check(imp, false)
		}
		for _, imp := range p.TestImports {
			if imp != p.Path {
				check(imp, true)
			}
		}
	}
	imports := map[string][]string{}
	for _, p := range pkgs {
		imports[p.Path] = append(imports[p.Path], p.Imports...)
	}
	for _, p := range pkgs {
		r, _ := rel(p.Path)
		if l := layerOf(r); l != nil && len(l.unlinked) > 0 {
			for imp, via := range reached(p.Path, imports, module) {
				if hasPrefix(imp, l.unlinked) {
					bad("%s links %s (imported by %s): %s", p.Path, imp, via, l.why)
				}
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// reached returns every import (of any module) made by a package of module that from reaches
// through non-test imports, from included, as a map from that import to a package importing it.
func reached(from string, imports map[string][]string, module string) map[string]string {
	out := map[string]string{}
	seen := map[string]bool{from: true}
	for queue := []string{from}; len(queue) > 0; queue = queue[1:] {
		p := queue[0]
		for _, imp := range imports[p] {
			if _, ok := out[imp]; !ok {
				out[imp] = p
			}
			if (imp == module || strings.HasPrefix(imp, module+"/")) && !seen[imp] {
				seen[imp] = true
				queue = append(queue, imp)
			}
		}
	}
	return out
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if s == p || strings.HasPrefix(s, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}
