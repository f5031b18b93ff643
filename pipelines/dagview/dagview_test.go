package dagview

import (
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
)

// buildNodes is a recipe build's node shape (ids as pipelines/build names them): layers in windows
// of size win (0: no calibration, RTN), kinds per layer, the first cached layers cached.
func buildNodes(layers, win, cachedLayers int) []Node {
	kinds := []string{"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}
	var nodes []Node
	add := func(n Node) { nodes = append(nodes, n) }
	var tiles []string
	prev := ""
	if win > 0 {
		add(Node{ID: "tokenize", Stage: "tokenize", Mem: 1 << 20, Cached: cachedLayers > 0})
		prev = "tokenize"
	}
	for a := 0; a < layers; a += max(win, 1) {
		b := min(a+max(win, 1), layers)
		cal := ""
		if win > 0 {
			cal = fmt.Sprintf("calibrate[%d,%d)", a, b)
			add(Node{ID: cal, Stage: "calibrate", Deps: []string{prev}, Mem: 8 << 30, Cached: a < cachedLayers})
		}
		var fins []string
		for l := a; l < b; l++ {
			for _, k := range kinds {
				name := fmt.Sprintf("blk.%d.%s.weight", l, k)
				fin := Node{ID: "finalize:" + name, Stage: "finalize", Mem: int64(100+l) << 20, Cached: l < cachedLayers}
				if cal != "" {
					fin.Deps = []string{cal}
				}
				add(fin)
				add(Node{ID: "tile:" + name, Stage: "tile", Deps: []string{fin.ID}, Mem: 32 << 20, Cached: l < cachedLayers})
				fins, tiles = append(fins, fin.ID), append(tiles, "tile:"+name)
			}
		}
		if win > 0 && b < layers {
			prev = fmt.Sprintf("propagate[%d,%d)", a, b)
			add(Node{ID: prev, Stage: "propagate", Deps: append([]string{cal}, fins...), Mem: 1 << 30, Cached: b <= cachedLayers})
		}
	}
	add(Node{ID: "write-orkpack", Stage: "write-orkpack", Deps: tiles, Mem: 64 << 20})
	add(Node{ID: "report", Stage: "report", Deps: []string{"write-orkpack"}, Mem: 64 << 20})
	return nodes
}

func TestLayout(t *testing.T) {
	for _, c := range []struct {
		name                   string
		nodes                  []Node
		group                  bool
		wantBoxes, wantWindows int
	}{
		{"demo: 5 windows of 1", buildNodes(5, 1, 2), true, 1 + 5*3 + 4 + 2, 5},
		{"27B: 16 windows of 4", buildNodes(64, 4, 0), true, 1 + 16*3 + 15 + 2, 16},
		{"RTN, 64 layers: 8 windows of 8", buildNodes(64, 0, 0), true, 8*2 + 2, 8},
		{"ungrouped", buildNodes(5, 1, 2), false, 1 + 5 + 5*14 + 4 + 2, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			boxes, wins := layout(c.nodes, c.group)
			if len(boxes) != c.wantBoxes || len(wins) != c.wantWindows {
				t.Fatalf("%d boxes in %d windows, want %d in %d", len(boxes), len(wins), c.wantBoxes, c.wantWindows)
			}
			seen := 0
			for _, b := range boxes {
				seen += len(b.nodes)
				for _, n := range b.nodes {
					if kindOf(n.ID) != b.kind {
						t.Errorf("node %s in a %s box", n.ID, b.kind)
					}
				}
			}
			if seen != len(c.nodes) {
				t.Errorf("%d nodes in boxes, %d planned", seen, len(c.nodes))
			}
		})
	}
	boxes, _ := layout(buildNodes(5, 1, 2), true)
	labels := map[string]string{}
	for _, b := range boxes {
		labels[strings.Join(b.label(false), "|")] = b.fill(false)
	}
	for label, fill := range map[string]string{
		"finalize ×7|≤ 100.00 MiB each|7/7 cached": "#c8c8c8", // layer 0: all cached
		"finalize ×7|≤ 104.00 MiB each|0/7 cached": "#ffffff",
		"calibrate[1,2)|8.00 GiB|cached":           "#c8c8c8",
		"write-orkpack|64.00 MiB":                  "#ffffff",
	} {
		if got, ok := labels[label]; !ok || got != fill {
			t.Errorf("box %q: fill %q (present %v), want %s; boxes: %v", label, got, ok, fill, labels)
		}
	}
}

func TestWriteDOT(t *testing.T) {
	nodes := buildNodes(64, 4, 8)
	nodes = append(nodes, Node{ID: `odd "name" \ here`, Stage: "x", Deps: []string{"report"}, Mem: 1})
	var a, b bytes.Buffer
	if err := WriteDOT(&a, nodes, Options{Title: "shape27b", Group: true}); err != nil {
		t.Fatal(err)
	}
	WriteDOT(&b, nodes, Options{Title: "shape27b", Group: true})
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two drawings of the same nodes differ")
	}
	out := a.String()
	for _, want := range []string{`label="shape27b: 931 nodes in 67 boxes"`, `subgraph cluster_w15 {`, `label="layers 60-63"`,
		`finalize ×28\n≤ 163.00 MiB each\n0/28 cached`, `"odd \"name\" \\ here\nx · 1 B"`, "[weight=8]"} {
		if !strings.Contains(out, want) {
			t.Errorf("DOT lacks %s", want)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^ +b\d+ \[label=`).FindAllString(out, -1)); n != 67 {
		t.Errorf("%d boxes declared, want 67", n)
	}
	dot, err := exec.LookPath("dot")
	if err != nil {
		testfiles.Need(t, "Graphviz dot not installed (apt-get install graphviz): the DOT text is not rendered")
	}
	cmd := exec.Command(dot, "-Tsvg")
	cmd.Stdin = strings.NewReader(out)
	svg, err := cmd.Output()
	if err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("finalize ×28")) {
		t.Fatalf("dot -Tsvg: %v\n%s", err, svg)
	}
}

func TestWriteMermaid(t *testing.T) {
	var b bytes.Buffer
	nodes := buildNodes(5, 1, 2)
	nodes[3].State, nodes[3].Note = "executed", `params.group: 32 -> 64 <"x">`
	if err := WriteMermaid(&b, nodes, Options{Title: "demo", Group: false, Explain: true}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"---\ntitle: \"demo: 82 nodes\"\n---\nflowchart TB\n", `  subgraph w0["layer 0"]`, "  end\n",
		`params.group: 32 -#gt; 64 #lt;#quot;x#quot;#gt;`, "b0 --> b1", "style b3 fill:#fdd49e"} {
		if !strings.Contains(out, want) {
			t.Errorf("Mermaid lacks %q", want)
		}
	}
	if strings.Count(out, "[\"") != 82+5 {
		t.Errorf("%d labelled shapes, want 82 nodes and 5 windows", strings.Count(out, "[\""))
	}
}
