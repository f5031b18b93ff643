package model

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/pack"
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
				var steps [][2]int
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
				}, func(done, total int) {
					steps = append(steps, [2]int{done, total})
				})
				if err != nil {
					t.Fatalf("group %d: %v", group, err)
				}
				if next != chunks {
					t.Fatalf("group %d: %d chunks scored, want %d", group, next, chunks)
				}
				// Steps: each block of the model once per group, and each chunk.
				total := (chunks+group-1)/group*m.Cfg.NLayer + chunks
				if len(steps) != total {
					t.Fatalf("group %d: %d progress calls, want %d", group, len(steps), total)
				}
				for i, st := range steps {
					if st != [2]int{i + 1, total} {
						t.Fatalf("group %d: progress call %d was %v, want [%d %d]", group, i, st, i+1, total)
					}
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

// TestMoESeqsMatchForward checks runMoESeqs, the routed experts of several sequences applied at once,
// against Forward of each sequence alone, bit for bit, in groups of 2 and 5 chunks and with the MoE
// scratch bounded to one, two and five sequences at a time, and that a RouteObserver sees each layer's
// routings in the same order: a generated llama MoE (8 experts, top-2) whose float expert weights are
// wide enough to be row-independent (the pure-Go build), and a small MoE model whose experts are the
// emulated entries of a W8A8 pack (any build).
func TestMoESeqsMatchForward(t *testing.T) {
	t.Run("float", func(t *testing.T) {
		if !gonumSgemm() {
			testfiles.SkipBuild(t, "-tags blas: OpenBLAS's float products are not row-independent, so runMoESeqs takes only emulated experts (the pack case)")
		}
		cfg := Config{Arch: "llama", NEmbd: 256, NFF: 256, NLayer: 2, NHead: 4, NHeadKV: 2, HeadDim: 64, NVocab: 97,
			RopeDim: 64, RopeBase: 10000, RopeFreqScale: 1, NormEps: 1e-5, NExpert: 8, NExpertUsed: 2}
		src, err := NewSyntheticSource(cfg, 3)
		if err != nil {
			t.Fatal(err)
		}
		checkMoESeqs(t, cfg, src)
	})
	t.Run("pack", func(t *testing.T) {
		c := moeConfig()
		path, _ := writeMoEModel(t, c, 21, 1)
		_, src := openMoE(t, path)
		ps, _ := testPackSource(t, src, expertSchemes(c, scheme{dtype: pack.I8Rot, group: 32, rotate: true}))
		checkMoESeqs(t, c, ps)
	})
}

func checkMoESeqs(t *testing.T, cfg Config, src WeightSource) {
	ctx := context.Background()
	m, err := NewModel(cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	l, err := LoadLayer(ctx, &cfg, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !m.moeTogether(l, 2, routeLog{}) {
		t.Fatal("the MoE block's experts are not row-independent: the test would not run runMoESeqs")
	}
	l.Release()
	const n, chunks = 40, 5
	tokens := func(c int, dst []int32) {
		for i := range dst {
			dst[i] = int32((c*131 + i*17 + i*i) % cfg.NVocab)
		}
	}
	want := make([][]float32, chunks)
	wantRoutes := routeLog{}
	for c := range chunks {
		batch := make([]int32, n)
		tokens(c, batch)
		if want[c], err = m.ForwardObserved(ctx, batch, wantRoutes); err != nil {
			t.Fatal(err)
		}
	}
	for _, group := range []int{2, chunks} {
		for _, moeSeqs := range []int{1, 2, chunks} {
			routes := routeLog{}
			mm, _ := NewModel(cfg, src)
			mm.testMoESeqs = moeSeqs
			err := forEachChunkIn(ctx, []evalModel{{m: mm, obs: routes}}, chunks, n, group, tokens, func(c int, logits [][]float32) error {
				for i, v := range logits[0] {
					if math.Float32bits(v) != math.Float32bits(want[c][i]) {
						return fmt.Errorf("chunk %d logit %d = %v, Forward %v", c, i, v, want[c][i])
					}
				}
				return nil
			}, nil)
			if err != nil {
				t.Fatalf("group %d, %d sequences at once: %v", group, moeSeqs, err)
			}
			for l, w := range wantRoutes {
				if !slices.Equal(routes[l], w) {
					t.Fatalf("group %d, %d sequences at once: layer %d routings differ from Forward's", group, moeSeqs, l)
				}
			}
		}
	}
}

// TestEvalScratchBytes checks the scratch an evaluation declares: a chunk's for a dense model, and for an
// MoE model also the routed experts' scratch of the sequences runMoESeqs takes at once, within 256 MiB
// and what the Model really allocates for them.
func TestEvalScratchBytes(t *testing.T) {
	dense := Config{Arch: "llama", NEmbd: 256, NFF: 512, NLayer: 2, NHead: 4, NHeadKV: 2, HeadDim: 64, NVocab: 97,
		RopeDim: 64, RopeBase: 10000, RopeFreqScale: 1, NormEps: 1e-5}
	if got, want := dense.EvalScratchBytes(128, 2, 0), dense.ScratchBytes(128); got != want {
		t.Errorf("dense: EvalScratchBytes = %d, want ScratchBytes %d", got, want)
	}
	for _, ctx := range []int{128, 512} {
		moe := dense
		moe.NEmbd, moe.NFF, moe.NExpert, moe.NExpertUsed = 2048, 1792, 32, 4
		extra := moe.EvalScratchBytes(ctx, 2, 0) - moe.ScratchBytes(ctx)
		seqs := min(moe.moeSeqs(ctx), EvalGroupChunks(moe.NEmbd, ctx, 2))
		if extra <= 0 || extra > moeGroupBytes || seqs < 2 {
			t.Errorf("MoE ctx %d: %d bytes beside a chunk's scratch for %d sequences at once: want (0, %d] and at least 2", ctx, extra, seqs, moeGroupBytes)
		}
		var s scratch
		s.get(&moe, moeKind, seqs*ctx, ctx)
		var held int64
		for _, f := range s.f {
			held += 4 * int64(len(f))
		}
		held += 8 * int64(len(s.sel)+cap(s.routed))
		if held != extra {
			t.Errorf("MoE ctx %d: runMoESeqs' scratch holds %d bytes, EvalScratchBytes counts %d", ctx, held, extra)
		}
		if one, want := moe.EvalScratchBytes(ctx, 2, 1), moe.ScratchBytes(ctx)+moe.moeScratch(1, ctx); one != want {
			t.Errorf("MoE ctx %d, one chunk: EvalScratchBytes = %d, want a chunk's scratch and one sequence's MoE scratch, %d", ctx, one, want)
		}
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
