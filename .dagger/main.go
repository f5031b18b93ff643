// Orkpipe runs orkpipe, the RK3588 NPU model-pack builder, inside Dagger.
//
// build turns a recipe and a source model into the build's output directory (pack, stub GGUF,
// report, provenance); verify checks a pack directory and returns the report. Both run the static
// linux/amd64 orkpipe binary in a container from scratch; pass it with --binary, or it is built
// from this repository with the Go toolchain image. orkpipe's own content-addressed cache lives in
// the cache volume "orkpipe-cache" of the engine, so a second build of the same recipe on the
// same engine executes no node. See docs/dagger.md.
package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"dagger/orkpipe/internal/dagger"
)

// goImage is the Go toolchain image the binary is built with when none is given (go.mod's Go).
const goImage = "golang:1.26"

type Orkpipe struct{}

// Build runs `orkpipe build` and returns its output directory (<name>.orkpack, <name>.orkpack.gguf,
// report.json, report.html, summary.txt, provenance.json).
func (m *Orkpipe) Build(
	ctx context.Context,
	// the recipe (YAML, docs/recipes.md)
	recipe *dagger.File,
	// files the recipe names by relative path (corpus, evaluation text); mounted as the recipe's folder
	// +optional
	recipeDir *dagger.Directory,
	// the source GGUF model (sets source.model); omit for recipes with source.synth
	// +optional
	model *dagger.File,
	// more recipe overrides, KEY=VALUE (as orkpipe build --set)
	// +optional
	set []string,
	// memory budget (orkpipe --mem)
	// +optional
	// +default="6GiB"
	mem string,
	// nodes run in parallel (orkpipe -j)
	// +optional
	// +default=4
	jobs int,
	// a static linux/amd64 orkpipe binary (CGO_ENABLED=0); built from source when absent
	// +optional
	binary *dagger.File,
	// the orkpipe repository, to build the binary from
	// +optional
	// +defaultPath="/"
	// +ignore=[".git", "orkpipe-out", "**/*.gguf", "**/*.orkpack"]
	source *dagger.Directory,
) (*dagger.Directory, error) {
	bin, err := m.binary(binary, source)
	if err != nil {
		return nil, err
	}
	dir := recipeDir
	if dir == nil {
		dir = dag.Directory()
	}
	args := []string{"/orkpipe", "--cache", "/cache", "--mem", mem, "-j", fmt.Sprint(jobs),
		"build", "/work/recipe/recipe.yaml", "-o", "/work/out"}
	ctr := runner(bin).
		WithDirectory("/work/recipe", dir).
		WithFile("/work/recipe/recipe.yaml", recipe)
	if model != nil {
		ctr = ctr.WithFile("/work/model.gguf", model)
		args = append(args, "--set", "source.model=/work/model.gguf")
	}
	for _, s := range set {
		if !strings.Contains(s, "=") {
			return nil, fmt.Errorf("set %q: want KEY=VALUE", s)
		}
		args = append(args, "--set", s)
	}
	return ctr.WithExec(args).Directory("/work/out"), nil
}

// Verify checks every orkpack in dir (header, index, every entry's BLAKE3 and decoding, domain
// plan) and every stub GGUF beside its pack, and returns the JSON reports, one per line. It fails
// if any check fails.
func (m *Orkpipe) Verify(
	ctx context.Context,
	// a build output directory (or a pulled pack directory)
	dir *dagger.Directory,
	// a static linux/amd64 orkpipe binary (CGO_ENABLED=0); built from source when absent
	// +optional
	binary *dagger.File,
	// the orkpipe repository, to build the binary from
	// +optional
	// +defaultPath="/"
	// +ignore=[".git", "orkpipe-out", "**/*.gguf", "**/*.orkpack"]
	source *dagger.Directory,
) (string, error) {
	bin, err := m.binary(binary, source)
	if err != nil {
		return "", err
	}
	packs, err := dir.Glob(ctx, "*.orkpack")
	if err != nil {
		return "", err
	}
	if len(packs) == 0 {
		return "", fmt.Errorf("no *.orkpack in the directory")
	}
	entries, err := dir.Entries(ctx)
	if err != nil {
		return "", err
	}
	ctr := runner(bin).WithDirectory("/work/in", dir)
	var report strings.Builder
	for _, p := range packs {
		out, err := ctr.WithExec([]string{"/orkpipe", "--json", "pack", "verify", "/work/in/" + p}).Stdout(ctx)
		if err != nil {
			return "", fmt.Errorf("pack verify %s: %w", p, err)
		}
		report.WriteString(out)
		stub := p + ".gguf"
		if !slices.Contains(entries, stub) {
			continue // no stub beside this pack
		}
		out, err = ctr.WithExec([]string{"/orkpipe", "--json", "stub", "verify", "/work/in/" + stub, "--pack", "/work/in/" + p}).Stdout(ctx)
		if err != nil {
			return "", fmt.Errorf("stub verify %s: %w", stub, err)
		}
		report.WriteString(out)
	}
	return report.String(), nil
}

// Binary returns the static linux/amd64 orkpipe binary built from source with the Go toolchain.
func (m *Orkpipe) Binary(
	// the orkpipe repository
	// +optional
	// +defaultPath="/"
	// +ignore=[".git", "orkpipe-out", "**/*.gguf", "**/*.orkpack"]
	source *dagger.Directory,
) *dagger.File {
	return dag.Container(dagger.ContainerOpts{Platform: "linux/amd64"}).
		From(goImage).
		WithMountedCache("/go/pkg/mod", dag.CacheVolume("orkpipe-gomod")).
		WithMountedCache("/root/.cache/go-build", dag.CacheVolume("orkpipe-gobuild")).
		WithEnvVariable("CGO_ENABLED", "0").
		WithEnvVariable("GOOS", "linux").
		WithEnvVariable("GOARCH", "amd64").
		WithDirectory("/src", source).
		WithWorkdir("/src").
		WithExec([]string{"go", "build", "-trimpath", "-o", "/out/orkpipe", "./cmd/orkpipe"}).
		File("/out/orkpipe")
}

func (m *Orkpipe) binary(bin *dagger.File, source *dagger.Directory) (*dagger.File, error) {
	if bin != nil {
		return bin, nil
	}
	if source == nil {
		return nil, fmt.Errorf("neither a binary nor the orkpipe source was given")
	}
	return m.Binary(source), nil
}

// runner is a container from scratch holding the orkpipe binary and orkpipe's cache volume.
func runner(bin *dagger.File) *dagger.Container {
	return dag.Container(dagger.ContainerOpts{Platform: "linux/amd64"}).
		WithFile("/orkpipe", bin, dagger.ContainerWithFileOpts{Permissions: 0o555}).
		WithMountedCache("/cache", dag.CacheVolume("orkpipe-cache")).
		WithDirectory("/tmp", dag.Directory()).
		WithWorkdir("/work")
}
