// Package depcheck keeps the import graph of DESIGN.md honest: dependencies point down the
// layout table (cmd -> pipelines -> stages -> artifacts/ork) and never back up, and the
// low layers use only the few third-party modules they are allowed.
package depcheck

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "orkpipe"

// rule describes which orkpipe packages and third-party modules a layer may import (transitively).
type rule struct {
	layer       string   // package path prefix inside the module
	mayImport   []string // orkpipe package prefixes allowed (besides the layer itself)
	thirdParty  []string // module path prefixes allowed; nil means any
	description string
}

var rules = []rule{
	{
		layer:       "ork/",
		mayImport:   []string{"ork/"},
		thirdParty:  []string{"github.com/zeebo/blake3", "github.com/klauspost/cpuid", "gonum.org/v1/", "golang.org/x/sys", "golang.org/x/sync", "golang.org/x/exp"},
		description: "ork is the domain library: only ork siblings",
	},
	{
		layer:       "artifacts",
		mayImport:   []string{"artifacts", "internal/units"},
		thirdParty:  []string{"github.com/zeebo/blake3", "lukechampine.com/blake3", "github.com/klauspost/cpuid", "github.com/klauspost/compress", "golang.org/x/sys"},
		description: "artifacts: standard library, x/sys, blake3 and zstd only",
	},
	{
		layer:       "stages",
		mayImport:   []string{"stages", "artifacts", "ork/", "internal/"},
		description: "stages: artifacts and ork only",
	},
	{
		layer:       "registry",
		mayImport:   []string{"registry", "artifacts", "ork/pack", "ork/gguf", "ork/tile", "ork/board", "ork/internal/", "internal/"},
		description: "registry: artifacts, ork/pack, ork/gguf",
	},
	{
		layer:       "pipelines",
		mayImport:   []string{"pipelines", "stages", "artifacts", "ork/", "registry", "internal/"},
		description: "pipelines: stages, artifacts, ork",
	},
}

func TestImportGraph(t *testing.T) {
	pkgs, err := exec.Command("go", "list", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(pkgs)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		var r *rule
		for i := range rules {
			if strings.HasPrefix(rel, rules[i].layer) {
				r = &rules[i]
				break
			}
		}
		if r == nil {
			continue
		}
		deps, err := exec.Command("go", "list", "-deps", "-f", `{{if not .Standard}}{{.ImportPath}}{{end}}`, pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(bytes.TrimSpace(deps))) {
			if dep == pkg {
				continue
			}
			if dep == module || strings.HasPrefix(dep, module+"/") {
				drel := strings.TrimPrefix(strings.TrimPrefix(dep, module), "/")
				if !hasPrefix(drel, r.mayImport) {
					t.Errorf("%s imports %s (%s)", pkg, dep, r.description)
				}
				continue
			}
			if r.thirdParty != nil && !hasPrefix(dep, r.thirdParty) {
				t.Errorf("%s depends on third-party %s (%s)", pkg, dep, r.description)
			}
		}
	}
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
