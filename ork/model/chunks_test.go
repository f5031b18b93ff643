package model

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"orkpipe/internal/testfiles"
)

// routeLog records every routing a model shows, per layer in the order seen.
type routeLog map[int][]string

func (r routeLog) Observe(int, Input, []float32) {}

func (r routeLog) ObserveRoute(layer, k int, sel []int, w []float32) {
	r[layer] = append(r[layer], fmt.Sprint(k, sel, w))
}

// TestForEachChunkMatchesForward runs the chunks of a text through models of each architecture family
// (llama; lfm2moe: convolutions, attention and experts, its matmul weights kept encoded as screen keeps
// them; qwen35 with every operation ggml's, whose attention rounds by ubatch) in groups of 1, 2 and all
// chunks, and checks every chunk's logits against Forward of that chunk alone, bit for bit, and that a
// RouteObserver sees each layer's routings in the same order.
func TestForEachChunkMatchesForward(t *testing.T) {
	ctx := context.Background()
	text, err := os.ReadFile(testfiles.Path(t, "tinystories_sample.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file          string
		encoded, ggml bool
	}{
		{"stories260K.gguf", false, false},
		{"tiny-lfm2moe-q8_0.gguf", true, false},
		{"tiny-qwen35-q8_0.gguf", false, true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			m, tok, f, err := OpenGGUF(ctx, testfiles.Path(t, tc.file), 64<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if tc.encoded {
				src := m.Src.(*GGUFSource)
				src.KeepEncoded, src.MapEncoded = true, true
			}
			m.GGMLExact = tc.ggml
			ids, err := tok.Encode(string(text), true, false)
			if err != nil {
				t.Fatal(err)
			}
			const n, chunks = 48, 5
			tokens := func(c int, dst []int32) { copy(dst, ids[c*n:(c+1)*n]) }
			want := make([][]float32, chunks)
			wantRoutes := routeLog{}
			for c := range chunks {
				batch := make([]int32, n)
				tokens(c, batch)
				m.GGMLUbatch = perplexityUbatch(n, c, chunks)
				if want[c], err = m.ForwardObserved(ctx, batch, wantRoutes); err != nil {
					t.Fatal(err)
				}
			}
			for _, group := range []int{1, 2, chunks} {
				routes := routeLog{}
				next := 0
				err := forEachChunkIn(ctx, []evalModel{{m: m, obs: routes}}, chunks, n, group, tokens, func(c int, logits [][]float32) error {
					if c != next {
						return fmt.Errorf("chunk %d scored, want %d", c, next)
					}
					next++
					for i, v := range logits[0] {
						if math.Float32bits(v) != math.Float32bits(want[c][i]) {
							return fmt.Errorf("chunk %d logit %d = %v, Forward %v", c, i, v, want[c][i])
						}
					}
					return nil
				})
				if err != nil {
					t.Fatalf("group %d: %v", group, err)
				}
				if next != chunks {
					t.Fatalf("group %d: %d chunks scored, want %d", group, next, chunks)
				}
				for l, w := range wantRoutes {
					if !slices.Equal(routes[l], w) {
						t.Fatalf("group %d: layer %d routings differ from Forward's (%d and %d batches)", group, l, len(routes[l]), len(w))
					}
				}
				if m.Cfg.MoE() && len(routes) == 0 {
					t.Fatal("an MoE model showed no routing")
				}
			}
		})
	}
}

func TestEvalGroupChunks(t *testing.T) {
	for _, tc := range []struct{ e, ctx, models, want int }{
		{5120, 512, 2, 12}, {2048, 128, 2, 128}, {64, 512, 1, 2048}, {1 << 20, 4096, 2, 1},
	} {
		if got := EvalGroupChunks(tc.e, tc.ctx, tc.models); got != tc.want {
			t.Errorf("EvalGroupChunks(%d, %d, %d) = %d, want %d", tc.e, tc.ctx, tc.models, got, tc.want)
		}
		if got := EvalGroupChunks(tc.e, tc.ctx, tc.models); got > 1 && got*tc.models*tc.ctx*tc.e*4 > evalGroupBytes {
			t.Errorf("EvalGroupChunks(%d, %d, %d) = %d holds more than %d bytes", tc.e, tc.ctx, tc.models, got, evalGroupBytes)
		}
	}
}
