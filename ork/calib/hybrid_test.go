package calib

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"orkpipe/ork/model"
)

// hybridModel opens a hybrid fixture and cuts 6 sequences of 96 tokens of the calibration text (two
// chunks of sequences, so the chunking is exercised too).
func hybridModel(t *testing.T, file string) (*model.Model, [][]int32) {
	t.Helper()
	return calibModel(t, file, 6, 96)
}

// readAll returns every sequence of a hidden-states file, concatenated.
func readAll(t *testing.T, path string) []float32 {
	t.Helper()
	r := openHidden(t, path)
	var all []float32
	for {
		x, err := r.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return all
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, x...)
	}
}

func maxRelDiff32(a, b []float32) float64 {
	var mx, d float64
	for i := range a {
		mx = math.Max(mx, math.Abs(float64(a[i])))
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d / mx
}

// TestHybridWindowsChain: on the hybrid fixtures (Gated DeltaNet + gated attention; short convolution
// + attention with MoE FFNs), calibrating one layer per window, each window re-running whole sequences
// from the previous window's hidden states, gives the hidden states at every window boundary and every
// Hessian (per site, per expert) of one window over all layers, to 1e-6 relative: recurrent and
// convolution state never needs to cross a boundary.
func TestHybridWindowsChain(t *testing.T) {
	for _, file := range []string{"tiny-qwen35.gguf", "tiny-lfm2moe.gguf"} {
		t.Run(file, func(t *testing.T) {
			m, seqs := hybridModel(t, file)
			ctx := context.Background()
			n := m.Cfg.NLayer
			dir := t.TempDir()
			emb := func() HiddenSource {
				s, err := NewEmbeddingSource(m, seqs)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			whole := captureToFile(t, m, Window{Start: 0, End: n}, emb(), filepath.Join(dir, "whole"))
			var chained []*Result
			var worstState, worstHessian float64
			var in HiddenSource = emb()
			for l := 0; l < n; l++ {
				path := filepath.Join(dir, fmt.Sprintf("chain.%d", l+1))
				chained = append(chained, captureToFile(t, m, Window{Start: l, End: l + 1}, in, path))
				in = openHidden(t, path)
				// The boundary states at l+1 in one pass: the float window [0, l+1).
				one := filepath.Join(dir, fmt.Sprintf("one.%d", l+1))
				f, err := os.Create(one)
				if err != nil {
					t.Fatal(err)
				}
				hdr := emb().Header()
				hdr.Layer = l + 1
				hw, err := NewHiddenWriter(f, hdr)
				if err != nil {
					t.Fatal(err)
				}
				if err := Propagate(ctx, m, Window{Start: 0, End: l + 1}, emb(), hw); err != nil {
					t.Fatal(err)
				}
				f.Close()
				d := maxRelDiff32(readAll(t, one), readAll(t, path))
				if d > 1e-6 {
					t.Errorf("boundary %d: chained windows and one pass differ by %.3g (relative to max |h|)", l+1, d)
				}
				worstState = max(worstState, d)
			}
			if d := maxRelDiff32(readAll(t, filepath.Join(dir, "whole")), readAll(t, filepath.Join(dir, fmt.Sprintf("chain.%d", n)))); d > 1e-6 {
				t.Errorf("states after the last block: chained and one window differ by %.3g", d)
			}
			hessians := 0
			for l := 0; l < n; l++ {
				for i, hs := range whole.Layers[l] {
					for e, a := range hs {
						b := chained[l].Layers[0][i][e]
						if a.Tokens != b.Tokens || a.K != b.K {
							t.Fatalf("layer %d site %d expert %d: %d and %d tokens", l, i, e, a.Tokens, b.Tokens)
						}
						if a.Tokens > 0 {
							d := maxRelDiff(a.Data, b.Data)
							if d > 1e-6 {
								t.Errorf("layer %d site %s expert %d: Hessians differ by %.3g", l, m.Cfg.Sites(l)[i].Name, e, d)
							}
							worstHessian = max(worstHessian, d)
						}
						hessians++
					}
				}
			}
			t.Logf("%s: %d layers, %d Hessians compared (kinds %v); largest relative difference: boundary states %.3g, Hessians %.3g",
				file, n, hessians, m.Cfg.Kinds, worstState, worstHessian)
		})
	}
}
