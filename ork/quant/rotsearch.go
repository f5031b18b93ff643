package quant

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"orkpipe/ork/internal/sgemm"
)

// gptqRotationSearch scores each seed of WithRotationSearch by the error tr(E·H·Eᵀ) against h of the
// weight RTN gives with it (the clip search weighted by diag(H), h never modified; seedScorer), then
// runs GPTQ once, with the best seed (ties keep the earlier) and the caller's options on h. The
// caller (GPTQ) has validated h.
func gptqRotationSearch(ctx context.Context, m Matrix, h *Hessian, c *config, opts []Option) (*Weight, error) {
	if !c.rotate || !c.signs {
		return nil, fmt.Errorf("%s: a rotation search of %d seeds needs a signed rotation: %w", m.Name, c.rotSearch, ErrParam)
	}
	sc := newSeedScorer(m, h.Data, c.workers)
	best, bestErr := c.seed, math.Inf(1)
	for i := 0; i < c.rotSearch; i++ {
		seed := SearchSeed(c.seed, i)
		o := append(append([]Option(nil), opts...), WithRotation(true, seed), WithRotationSearch(1),
			WithScaleSearch(ScaleSearchWeighted), keepHessian(), hessianChecked())
		w, err := RTN(ctx, m, h, o...)
		if err != nil {
			return nil, err
		}
		e, err := sc.score(ctx, w)
		if err != nil {
			return nil, fmt.Errorf("%s: seed %#x: %w", m.Name, seed, err)
		}
		if e < bestErr {
			best, bestErr = seed, e
		}
	}
	sc = nil // its buffers are garbage before GPTQ allocates its own
	return GPTQ(ctx, m, h, append(append([]Option(nil), opts...), WithRotation(true, best), WithRotationSearch(1), hessianChecked())...)
}

// RotationSearchMemory is the peak memory in bytes a rotation search (WithRotationSearch) adds to
// GPTQ's for an n x k weight rotated to kp columns in groups of group (0: per row) with Hadamard
// blocks of block: one seed's RTN trial at a time (its rotated rows, codes and scales, the rotated
// diag(H) and one block of H) and the scorer's buffers (Eᵀ as float32, N x K; a K x errorPanel
// float32 panel; per worker errorRows rows of E, dequantized and mapped back, a tile of them being
// transposed, and the inverse rotation's float64 row), workers = GOMAXPROCS.
func RotationSearchMemory(n, k, kp, group, block int) int64 {
	N, K, KP, B := int64(n), int64(k), int64(kp), int64(block)
	ng := int64(1)
	if group > 0 {
		ng = (KP + int64(group) - 1) / int64(group)
	}
	trial := N*KP*4 + N*KP + N*ng*4 + KP*8 + B*B*8
	worker := errorRows*(KP+K+errorTile)*4 + KP*8
	return trial + N*K*4 + K*errorPanel*4 + worker*int64(runtime.GOMAXPROCS(0))
}

// errorRows is the rows of E one worker forms at a time before writing them into Eᵀ, errorTile
// columns of them at a time.
const (
	errorRows = 64
	errorTile = 64
)

// seedScorer scores the trials of a rotation search against one weight m and Hessian h (K x K,
// row-major): tr(E·H·Eᵀ) for E = W − Q, Q the trial's weight mapped back from its rotated space
// (HessianError's value up to rounding), as Σ_ij H_ij·(EᵀE)_ij. Its buffers serve every trial: Eᵀ
// (K x N) and a panel, both float32.
//
// The arithmetic is SearchVersion 3: each entry of E is its float64 difference rounded once to
// float32, EᵀE's lower part is formed in float32 panels of errorPanel columns ((EᵀE)[a:, a:b] =
// Eᵀ[a:]·Eᵀ[a:b]ᵀ, products of rows: OpenBLAS's sgemm, or in the pure-Go build sgemm.NT with
// gonum's Sgemm's bits), and each panel's dot products with H are summed in float64, its diagonal
// blocks once and the part below them twice. A score's relative rounding stays near float32's epsilon
// (at most 2e-8 in TestSeedScoreMatchesHessianError, whose Hessian is correlated), far below the
// differences between seeds. E is formed errorRows rows at a time on the workers (dequantized,
// mapped back, subtracted, transposed into Eᵀ): n·k² flops in BLAS and O(n·k·log) around them.
type seedScorer struct {
	m       Matrix
	h       []float64
	et      []float32
	panel   []float32
	workers int
	nt      ntFunc
}

// ntFunc sets C = A·Bᵀ (beta 0), all row-major, with the bits of blas32's Sgemm(NoTrans, Trans).
type ntFunc func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int)

// blasNT is the float32 product the search's panels take: in the pure-Go build sgemm.NT, which
// gives gonum's Sgemm's bits several times faster; under -tags blas OpenBLAS's sgemm.
func blasNT() ntFunc {
	if sgemm.GonumRegistered() {
		return func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
			sgemm.NT(m, n, k, a, lda, b, ldb, 0, c, ldc)
		}
	}
	return func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
		blas32.Gemm(blas.NoTrans, blas.Trans, 1, blas32.General{Rows: m, Cols: k, Stride: lda, Data: a},
			blas32.General{Rows: n, Cols: k, Stride: ldb, Data: b}, 0, blas32.General{Rows: m, Cols: n, Stride: ldc, Data: c})
	}
}

func newSeedScorer(m Matrix, h []float64, workers int) *seedScorer {
	k := m.Cols
	return &seedScorer{m: m, h: h, et: make([]float32, k*m.Rows), panel: make([]float32, k*min(k, errorPanel)), workers: workers, nt: blasNT()}
}

// score returns the trial weight q's error tr(E·H·Eᵀ). ctx is checked between row chunks and panels.
func (s *seedScorer) score(ctx context.Context, q *Weight) (float64, error) {
	n, k := s.m.Rows, s.m.Cols
	if q.N != n || q.K != k || len(s.h) != k*k {
		return 0, fmt.Errorf("score: weight %dx%d, trial %dx%d, Hessian %d values: %w", n, k, q.N, q.K, len(s.h), ErrShape)
	}
	if !q.Rotation.IsZero() {
		if err := q.Rotation.Validate(); err != nil {
			return 0, err
		}
	}
	if err := s.transposedErrors(ctx, q); err != nil {
		return 0, err
	}
	tr := 0.0
	pw := min(k, errorPanel)
	for a := 0; a < k; a += pw {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		b := min(a+pw, k)
		rows, cols := k-a, b-a
		s.nt(rows, cols, n, s.et[a*n:], n, s.et[a*n:], n, s.panel[:rows*cols], cols)
		for i := 0; i < rows; i++ {
			hr := s.h[(a+i)*k+a : (a+i)*k+b]
			v := 0.0
			for j, p := range s.panel[i*cols : (i+1)*cols] {
				v += hr[j] * float64(p)
			}
			if i >= cols {
				v *= 2
			}
			tr += v
		}
	}
	return tr, nil
}

// transposedErrors writes Eᵀ for the trial q into s.et, errorRows rows of E at a time on s.workers goroutines.
func (s *seedScorer) transposedErrors(ctx context.Context, q *Weight) error {
	n, k, kp := s.m.Rows, s.m.Cols, q.KP
	var (
		mu    sync.Mutex
		first error
	)
	blocks := (n + errorRows - 1) / errorRows
	err := forRows(ctx, blocks, s.workers, func(b0, b1 int) {
		deq := make([]float32, errorRows*kp)
		tileBuf := make([]float32, errorTile*errorRows)
		e := deq
		if !q.Rotation.IsZero() {
			e = make([]float32, errorRows*k)
		}
		for blk := b0; blk < b1; blk++ {
			r0, r1 := blk*errorRows, min((blk+1)*errorRows, n)
			rows := r1 - r0
			q.dequantizeRows(deq[:rows*kp], r0, r1)
			if !q.Rotation.IsZero() {
				if err := q.Rotation.Inverse(e[:rows*k], deq[:rows*kp], rows); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
			// A tile of 64 columns is transposed in tileBuf (in cache), then each of its columns
			// is written to its row of Eᵀ in one piece: written straight into Eᵀ, every value of
			// a row of E landed on another page (Eᵀ's rows are n·4 bytes apart).
			for c0 := 0; c0 < k; c0 += errorTile {
				c1 := min(c0+errorTile, k)
				for r := 0; r < rows; r++ {
					w := s.m.Data[(r0+r)*k+c0 : (r0+r)*k+c1]
					er := e[r*k+c0 : r*k+c1]
					for c, v := range w {
						tileBuf[c*errorRows+r] = float32(float64(v) - float64(er[c]))
					}
				}
				for c := c0; c < c1; c++ {
					copy(s.et[c*n+r0:c*n+r1], tileBuf[(c-c0)*errorRows:])
				}
			}
		}
	})
	if err != nil {
		return err
	}
	return first
}
