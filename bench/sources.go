package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"orkpipe/artifacts"
	"orkpipe/stages"
)

// shape is a llama-family model shape for generated sources; Type is the GGUF type of its matmul
// weights and embeddings (Q8_0 unless set).
type shape struct {
	Layers, Embd, FF, Heads, HeadsKV int
	Type                             string
}

// shape27B is the 27B hybrid's matmul shape (n_embd 5120, n_ff 17408); shapeScaled keeps its
// graph (7 matmul weights per layer, 64 layers: 448 weights) with every width divided by 20.
func shape27B(layers int) shape    { return shape{layers, 5120, 17408, 40, 8, "Q8_0"} }
func shapeScaled(layers int) shape { return shape{layers, 256, 864, 8, 2, "Q8_0"} }

func (s shape) String() string {
	return fmt.Sprintf("%d layer%s, n_embd %d, n_ff %d", s.Layers, map[bool]string{true: "", false: "s"}[s.Layers == 1], s.Embd, s.FF)
}

// source generates (once per shape) a synthetic GGUF through the CLI's node entry point
// (`orkpipe node exec` of the synth stage: the same bytes `build` would synthesize) and returns
// its path.
func (e *env) source(s shape) (string, error) {
	name := fmt.Sprintf("src-%dx%dx%d-%s.gguf", s.Layers, s.Embd, s.FF, s.Type)
	p := filepath.Join(e.dir, name)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	kind, err := stages.Lookup("synth")
	if err != nil {
		return "", err
	}
	params, err := json.Marshal(stages.SynthParams{Layers: s.Layers, Embd: s.Embd, FF: s.FF, Heads: s.Heads, HeadsKV: s.HeadsKV,
		Vocab: 512, Ctx: 256, Type: s.Type, Seed: 1})
	if err != nil {
		return "", err
	}
	numerics, err := e.numerics()
	if err != nil {
		return "", err
	}
	m := stages.KeyMaterial{Stage: "synth", Version: kind.Version(), Params: params, Numerics: numerics,
		Inputs: map[string]artifacts.Digest{}, Tools: map[string]artifacts.Digest{}}
	key, err := m.Key()
	if err != nil {
		return "", err
	}
	raw, err := m.Canonical()
	if err != nil {
		return "", err
	}
	work, err := e.fresh("synth-" + name)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	mat := filepath.Join(work, "material.json")
	if err := os.WriteFile(mat, raw, 0o644); err != nil {
		return "", err
	}
	in := filepath.Join(work, "inputs")
	if err := os.Mkdir(in, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(work, "out")
	start := time.Now()
	if _, _, err := e.command(nil, e.orkpipe, "node", "exec", "--key", key.String(), "--material", mat, "--inputs", in, "-o", out); err != nil {
		return "", fmt.Errorf("generating the source %s: %w", s, err)
	}
	if err := os.Rename(filepath.Join(out, "outputs", "model.gguf"), p); err != nil {
		return "", fmt.Errorf("generating the source %s: %w", s, err)
	}
	e.log.Info("generated source", "shape", s.String(), "path", p, "seconds", time.Since(start).Seconds())
	return p, nil
}

// recipe writes a recipe named name packing every matmul weight of src with method (rtn or gptq)
// and returns its path. GPTQ recipes calibrate on the repository's demo corpus; extra is added to
// the scheme (e.g. "clip_grid: [1.0]").
func (e *env) recipe(name, src, method string, extra ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nsource:\n  model: %s\n", name, src)
	if method == "gptq" {
		fmt.Fprintf(&b, "calibration:\n  corpus: %s\n  sequences: 4\n  ctx: 128\n  mode: sequential\n  window: auto\n", e.corpus)
	}
	fmt.Fprintf(&b, "schemes:\n  - match: 'blk\\.\\d+\\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\\.weight'\n    method: %s\n    dtype: I4_NATIVE\n    group: 32\n", method)
	for _, x := range extra {
		fmt.Fprintf(&b, "    %s\n", x)
	}
	p := filepath.Join(e.dir, name+".yaml")
	return p, os.WriteFile(p, []byte(b.String()), 0o644)
}

// buildArgv is a cold or warm `orkpipe build` of recipe into out with cache and --mem.
func (e *env) buildArgv(cache, recipe, out string, mem int64) []string {
	return []string{e.orkpipe, "--cache", cache, "--mem", fmt.Sprintf("%dMiB", mem>>20), "--json", "build", recipe, "-o", out}
}

// countNodes runs `orkpipe build --plan --json` and returns the number of nodes of the plan.
func (e *env) countNodes(cache, recipe string) (int, error) {
	var out bytes.Buffer
	if _, _, err := e.command(&out, e.orkpipe, "--cache", cache, "--json", "build", recipe, "--plan"); err != nil {
		return 0, err
	}
	var plan struct {
		Nodes []json.RawMessage `json:"nodes"`
	}
	if err := json.Unmarshal(out.Bytes(), &plan); err != nil {
		return 0, fmt.Errorf("build --plan --json of %s: %w", recipe, err)
	}
	return len(plan.Nodes), nil
}

// executed reads a build's JSON Lines events and returns the summary's executed count.
func executed(jsonl []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(jsonl))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var ev struct {
			Event    string `json:"event"`
			Executed int    `json:"executed"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event == "summary" {
			return ev.Executed, nil
		}
	}
	return 0, fmt.Errorf("no summary event in the build's output")
}

// numerics returns the run's orkpipe binary's stages.Numerics (`orkpipe version --json`): key
// material of every node it runs, which differs from this process's own when the binary is a
// -tags blas build.
func (e *env) numerics() (string, error) {
	var out bytes.Buffer
	if _, _, err := e.command(&out, e.orkpipe, "version", "--json"); err != nil {
		return "", err
	}
	var v struct {
		Numerics *string `json:"numerics"`
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.Numerics == nil {
		return "", fmt.Errorf("%s version --json: no numerics in %q (%v)", e.orkpipe, out.String(), err)
	}
	return *v.Numerics, nil
}
