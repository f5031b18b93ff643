package main

import (
	"bytes"
	"context"
	"image"
	"image/draw"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"orkpipe/internal/testfiles"
	"orkpipe/registry/regtest"
	"orkpipe/stages/reporthtml"
)

// TestReportPages builds the demo and the stories260K W4A8 recipe through the CLI and checks every
// page they lead to: each build's report.html (self-contained: reporthtml.Check parses it, every SVG
// has a viewBox, nothing is fetched), `orkpipe report DIR` byte-identical to it, the run's timeline,
// `diff --html`, and — after `push --sign` to a real registry — `orkpipe report REF --trust`
// byte-identical to the build's page. Each page is rendered by headless Chromium and the screenshot
// must not be blank (ORKPIPE_SCREENSHOTS=DIR keeps the PNGs).
func TestReportPages(t *testing.T) {
	cache, dir := t.TempDir(), t.TempDir()
	demoOut, w4Out := filepath.Join(dir, "demo"), filepath.Join(dir, "w4a8")
	run := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := demoCLI(t, append([]string{"--cache", cache}, args...)...)
		if code != 0 {
			t.Fatalf("orkpipe %s: exit %d\n%s", strings.Join(args, " "), code, stderr)
		}
		return stdout
	}
	run("build", filepath.Join("..", "..", "pipelines", "recipes", "demo.yaml"), "-o", demoOut)
	run("build", filepath.Join("..", "..", "pipelines", "recipes", "w4a8-gptq-g32-rot.yaml"), "-o", w4Out,
		"--set", "source.model="+testfiles.Path(t, "stories260K.gguf"), "--set", "calibration.corpus="+testfiles.Path(t, "stories-calib.txt"),
		"--set", "calibration.sequences=23", "--set", "screen.text="+testfiles.Path(t, "tinystories_sample.txt"))

	pages := map[string]string{} // name -> path, for the screenshots
	for _, out := range []string{demoOut, w4Out} {
		built, err := os.ReadFile(filepath.Join(out, "report.html"))
		if err != nil {
			t.Fatal(err)
		}
		if err := reporthtml.Check(built); err != nil {
			t.Errorf("%s/report.html: %v", out, err)
		}
		for _, want := range []string{"KL divergence of every scored token", "Quantization error per layer and weight", "IOMMU domain plan", "source-model"} {
			if !bytes.Contains(built, []byte(want)) {
				t.Errorf("%s/report.html lacks %q", out, want)
			}
		}
		if got := run("report", out); got != string(built) {
			t.Errorf("orkpipe report %s differs from the build's report.html", out)
		}
		pages[filepath.Base(out)+"-report"] = filepath.Join(out, "report.html")
		pages[filepath.Base(out)+"-timeline"] = filepath.Join(out, reporthtml.TimelineFile)
	}
	diffPage := filepath.Join(dir, "diff.html")
	run("diff", "--html", demoOut, w4Out, "-o", diffPage)
	pages["diff"] = diffPage
	for name, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil || reporthtml.Check(b) != nil {
			t.Errorf("%s (%s): %v", name, p, err)
		}
	}
	// -o over a file that already holds the page leaves it as it is; over another file, only --force.
	st0, _ := os.Stat(diffPage)
	if _, stderr, code := demoCLI(t, "--cache", cache, "diff", "--html", demoOut, w4Out, "-o", diffPage); code != 0 {
		t.Errorf("diff -o over the same page: exit %d: %s", code, stderr)
	}
	if st1, _ := os.Stat(diffPage); !os.SameFile(st0, st1) {
		t.Error("diff -o rewrote a file that already held the page")
	}
	other := filepath.Join(dir, "other.html")
	if err := os.WriteFile(other, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := demoCLI(t, "--cache", cache, "diff", "--html", demoOut, w4Out, "-o", other); code != 1 || !strings.Contains(stderr, "--force") {
		t.Errorf("diff -o over another file: exit %d: %s", code, stderr)
	}
	if b, _ := os.ReadFile(other); string(b) != "mine" {
		t.Errorf("a refused diff -o changed the file: %.40q", b)
	}
	if _, stderr, code := demoCLI(t, "--cache", cache, "diff", "--html", demoOut, w4Out, "-o", other, "--force"); code != 0 {
		t.Errorf("diff -o --force: exit %d: %s", code, stderr)
	}
	if b, _ := os.ReadFile(other); reporthtml.Check(b) != nil {
		t.Error("diff -o --force did not write the page")
	}

	// The page of a pushed artifact, from its report.json alone, is the build's.
	reg := regtest.Start(t, nil)
	key := filepath.Join(t.TempDir(), "release.key")
	run("key", "generate", "-o", key)
	ref := reg.Ref("packs/demo", "v1")
	run("push", demoOut, ref, "--plain-http", "--sign", key)
	got := run("report", ref, "--plain-http", "--trust", key+".pub")
	if built, _ := os.ReadFile(filepath.Join(demoOut, "report.html")); got != string(built) {
		t.Errorf("orkpipe report %s: %d bytes, differ from the build's report.html (%d bytes)", ref, len(got), len(built))
	}
	if _, stderr, code := demoCLI(t, "report", reg.Ref("packs/none", "v1"), "--plain-http"); code != 1 {
		t.Errorf("report of a missing artifact: exit %d: %s", code, stderr)
	}

	chromium := chromiumPath(t)
	for name, p := range pages {
		png := screenshot(t, chromium, p)
		checkNotBlank(t, name, png)
		if keep := os.Getenv("ORKPIPE_SCREENSHOTS"); keep != "" {
			if err := os.WriteFile(filepath.Join(keep, name+".png"), png, 0o644); err != nil {
				t.Error(err)
			}
		}
	}
}

// chromiumPath finds Debian's chromium; without it the screenshots are skipped, except in CI
// (.ci/run installs it), where that is a failure.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		testfiles.Need(t, "chromium not installed (apt-get install -y chromium): the pages were checked, not rendered (%v)", err)
	}
	return p
}

// screenshot renders the page at path in headless Chromium (a fresh profile, no network services)
// and returns the PNG.
func screenshot(t *testing.T, chromium, path string) []byte {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	profile, out := t.TempDir(), filepath.Join(t.TempDir(), "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hung browser fails, it does not block the suite
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir="+profile,
		"--hide-scrollbars", "--window-size=1000,2400", "--screenshot="+out, "file://"+abs)
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chromium on %s: %v\n%s", path, err, log)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("chromium wrote no screenshot of %s: %v\n%s", path, err, log)
	}
	return b
}

// checkNotBlank requires ink in a screenshot: at least 2% of the pixels differ from the top-left
// one (the page background) and at least 24 distinct colours (text, charts, cells).
func checkNotBlank(t *testing.T, name string, b []byte) {
	t.Helper()
	ink, colours, err := inkOf(b)
	if err != nil {
		t.Fatalf("%s: screenshot: %v", name, err)
	}
	t.Logf("%s: %.1f%% ink, %d colours", name, 100*ink, colours)
	if ink < 0.02 || colours < 24 {
		t.Errorf("%s: the screenshot is (nearly) blank: %.2f%% of the pixels differ from the background, %d colours", name, 100*ink, colours)
	}
}

// inkOf returns the fraction of a PNG's pixels (every other row and column) that differ from its
// top-left pixel, and how many colours they have.
func inkOf(b []byte) (float64, int, error) {
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return 0, 0, err
	}
	r := img.Bounds()
	bg := img.At(r.Min.X, r.Min.Y)
	colours := map[[3]uint32]bool{}
	ink, samples := 0, 0
	for y := r.Min.Y; y < r.Max.Y; y += 2 {
		for x := r.Min.X; x < r.Max.X; x += 2 {
			c := img.At(x, y)
			if c != bg {
				ink++
			}
			cr, cg, cb, _ := c.RGBA()
			colours[[3]uint32{cr >> 8, cg >> 8, cb >> 8}] = true
			samples++
		}
	}
	return float64(ink) / float64(max(samples, 1)), len(colours), nil
}

// TestInkOf: a blank image has no ink; one with a drawn block has.
func TestInkOf(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 100, 100))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	enc := func() []byte {
		var b bytes.Buffer
		if err := png.Encode(&b, img); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	if ink, colours, err := inkOf(enc()); err != nil || ink != 0 || colours != 1 {
		t.Errorf("blank: ink %v, %d colours, %v", ink, colours, err)
	}
	draw.Draw(img, image.Rect(10, 10, 60, 30), image.Black, image.Point{}, draw.Src)
	if ink, colours, err := inkOf(enc()); err != nil || ink != 0.1 || colours != 2 {
		t.Errorf("a black block: ink %v, %d colours, %v", ink, colours, err)
	}
}

// TestPlanGraphs: plan --format dot of the demo renders with Graphviz; a 64-layer 27B-shaped recipe
// (planned only, nothing runs) is drawn in grouped boxes, not one box per node; mermaid has its
// structure; explain draws the last build's outcomes.
func TestPlanGraphs(t *testing.T) {
	cache := t.TempDir()
	demo := filepath.Join("..", "..", "pipelines", "recipes", "demo.yaml")
	out, err := runCLI(t, "--cache", cache, "plan", demo, "--format", "dot")
	if err != nil || !strings.HasPrefix(out, `digraph "demo" {`) || !strings.Contains(out, "demo: 88 nodes in 28 boxes") {
		t.Fatalf("plan --format dot: %v\n%s", err, out)
	}
	if dot, err := exec.LookPath("dot"); err == nil {
		cmd := exec.Command(dot, "-Tsvg")
		cmd.Stdin = strings.NewReader(out)
		if svg, err := cmd.Output(); err != nil || !bytes.Contains(svg, []byte("<svg")) {
			t.Errorf("plan --format dot | dot -Tsvg: %v", err)
		}
	} else if testfiles.InCI() {
		t.Errorf("Graphviz dot not found (%v): CI installs graphviz", err)
	} else {
		t.Logf("Graphviz dot not installed: the DOT text was checked, not rendered")
	}
	out, err = runCLI(t, "--cache", cache, "plan", demo, "--format", "mermaid")
	if err != nil || !strings.Contains(out, "flowchart TB\n") || strings.Count(out, "  end\n") != 5 {
		t.Errorf("plan --format mermaid: %v\n%s", err, out)
	}

	recipe := filepath.Join(t.TempDir(), "shape27b.yaml")
	corpus, _ := filepath.Abs(filepath.Join("..", "..", "pipelines", "recipes", "demo-stories-calib.txt"))
	os.WriteFile(recipe, []byte(`name: shape27b
source:
  synth: {layers: 64, n_embd: 5120, n_ff: 17408, n_head: 40, n_head_kv: 8, vocab: 32000, ctx: 4096, type: Q8_0, seed: 1}
calibration: {corpus: `+corpus+`, sequences: 32, ctx: 512, mode: sequential, window: auto}
schemes:
  - {match: 'blk\.\d+\.(attn_output|ffn_down)\.weight', method: gptq, dtype: I4_ROT_A8, group: 32}
  - {match: 'blk\.\d+\.(attn_q|attn_k|attn_v|ffn_gate|ffn_up)\.weight', method: gptq, dtype: I4_NATIVE, group: 32, rotation: hadamard}
`), 0o644)
	out, err = runCLI(t, "--cache", cache, "--mem", "24GiB", "plan", recipe, "--format", "dot")
	m := regexp.MustCompile(`shape27b: (\d+) nodes in (\d+) boxes`).FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("plan of the 27B-shaped recipe: %v\n%.2000s", err, out)
	}
	nodes, boxes := atoiT(t, m[1]), atoiT(t, m[2])
	t.Logf("27B-shaped recipe: %d nodes drawn in %d boxes, %d windows", nodes, boxes, strings.Count(out, "subgraph cluster_"))
	if nodes < 64*7*2 || boxes > 100 || strings.Count(out, "subgraph cluster_") < 2 {
		t.Errorf("27B-shaped plan: %d nodes in %d boxes, %d windows: want the per-weight nodes grouped per window", nodes, boxes, strings.Count(out, "subgraph cluster_"))
	}

	outDir := filepath.Join(t.TempDir(), "out")
	if _, err := runCLI(t, "--cache", cache, "build", demo, "-o", outDir); err != nil {
		t.Fatal(err)
	}
	out, err = runCLI(t, "--cache", cache, "explain", demo, "--format", "dot")
	if err != nil || !strings.Contains(out, `fillcolor="#fdd49e"`) || !strings.Contains(out, "7 executed") {
		t.Errorf("explain --format dot after the first build: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "--json", "plan", demo, "--format", "dot"); err == nil {
		t.Error("--json with --format dot was accepted")
	}
}

func atoiT(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
