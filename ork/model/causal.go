package model

import (
	"math"

	"orkpipe/ork/internal/parallel"
	"orkpipe/ork/internal/sgemm"
	"orkpipe/ork/model/internal/softmax"
)

// causalRows is the number of query rows of one head a causalAttention work item takes.
const causalRows = 64

// causalAttention is attention (see there for the shapes) over the causal half of the scores only, with
// the arithmetic of gemmAttention under gonum's Sgemm, bit for bit:
//
//   - a score S[i][j] (j <= i) is 0 + scale·dot(q_i, k_j) with gonum's dot, over the whole head or,
//     when Sgemm takes its parallel path for the T×T product (gemmParallel(t, t)), over slices of
//     gonumBlock values, each slice's scaled dot added in turn. sgemm.NTSerial computes the unscaled dots
//     (0 + dot, which scales to the same value) of a block of query rows against every key up to the
//     block's last, one NT call a slice where the slices matter (head_dim above gonumBlock);
//   - the softmax of row i is softmax.Row(S[i][0..i]), causalSoftmax's;
//   - O[i] is S[i][0..i]·V[0..i], which sgemm.NN sums as Sgemm does (each output from 0, the products
//     in order of j, zeros skipped), so the zeros above the diagonal that gemmAttention multiplies
//     and skips are not there at all.
//
// Only the diagonal blocks' upper halves of the scores are computed and not used. Work items are (head,
// block of causalRows query rows), the longest rows first; scoreBuf holds causalScratch(heads, t)
// values.
func causalAttention(out, scoreBuf, q, k, v []float32, t, heads, kvHeads, hd int) {
	qd, kvd := heads*hd, kvHeads*hd
	group := heads / kvHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	slice := hd
	if gemmParallel(t, t) {
		slice = min(hd, gonumBlock)
	}
	blocks := ceilDiv(t, causalRows)
	items := heads * blocks
	rows := min(t, causalRows)
	parallel.ForWorker(items, parallel.Workers(items), func(w, it int) {
		b, h := blocks-1-it/heads, it%heads
		kh := h / group
		i0, i1 := b*causalRows, min(t, (b+1)*causalRows)
		s := scoreBuf[2*w*rows*t:][:rows*t]
		part := scoreBuf[(2*w+1)*rows*t:][:rows*t]
		qb, kb := q[i0*qd+h*hd:], k[kh*hd:]
		for k0 := 0; k0 < hd; k0 += slice {
			kn := min(slice, hd-k0)
			dst := s
			if k0 > 0 {
				dst = part
			}
			sgemm.NTSerial(i1-i0, i1, kn, qb[k0:], qd, kb[k0:], kvd, 0, dst, t)
			for r := range i1 - i0 {
				srow, prow := s[r*t:][:i0+r+1], dst[r*t:][:i0+r+1]
				if k0 == 0 {
					for j, c := range srow {
						srow[j] = 0 + scale*c
					}
					continue
				}
				for j, c := range prow {
					srow[j] += scale * c
				}
			}
		}
		for i := i0; i < i1; i++ {
			row := s[(i-i0)*t:][:i+1]
			softmax.Row(row)
			sgemm.NN(1, hd, i+1, row, i+1, v[kh*hd:], kvd, out[i*qd+h*hd:], qd)
		}
	})
}

// causalScratch is the float32 scratch causalAttention needs: two blocks of causalRows·t values (t·t
// below causalRows tokens) for each goroutine it runs on.
func causalScratch(heads, t int) int {
	return 2 * parallel.Workers(heads*ceilDiv(t, causalRows)) * min(t, causalRows) * t
}
