package stages

import (
	"context"
	"fmt"
	"io"

	"orkpipe/artifacts"
	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
	"orkpipe/ork/quant"
)

// finalizeSource is the matrix one finalize node quantizes: a 2-D weight, or one expert slice of
// an MoE expert tensor.
type finalizeSource struct {
	M      quant.Matrix
	Digest artifacts.Digest // BLAKE3 of exactly the source bytes of M (the whole tensor, or the slice)
	Entry  string           // the pack entry name: the tensor name, or "<name>#<e>"
	NMat   int              // matrices in the tensor: 1, or n_expert
	Mat    int              // which one M is
}

// readFinalizeSource reads weight tensor of f as an N x K float32 matrix. With expert nil the tensor
// must be 2-D [K, N] (GGUF ne order). With expert e it must be a 3-D MoE expert tensor
// [K, N, n_expert] (llama.cpp's ffn_*_exps layout), and the matrix is expert e: rows [e·N, (e+1)·N)
// of its N·n_expert rows, contiguous in the file. Only those rows are read and hashed.
func readFinalizeSource(ctx context.Context, f *gguf.File, tensor string, expert *int, n, k int) (*finalizeSource, error) {
	t, err := f.Tensor(tensor)
	if err != nil {
		return nil, err
	}
	src := &finalizeSource{Entry: tensor, NMat: 1}
	switch {
	case expert == nil:
		if len(t.Shape) != 2 || t.Shape[0] != int64(k) || t.Shape[1] != int64(n) {
			return nil, fmt.Errorf("%s: tensor %s has shape %v, the plan says [%d %d]", f.Path, tensor, t.Shape, k, n)
		}
	default:
		e := *expert
		if len(t.Shape) != 3 || t.Shape[0] != int64(k) || t.Shape[1] != int64(n) {
			return nil, fmt.Errorf("%s: tensor %s has shape %v, the plan says an MoE expert tensor [%d %d n_expert]", f.Path, tensor, t.Shape, k, n)
		}
		if e < 0 || int64(e) >= t.Shape[2] {
			return nil, fmt.Errorf("%s: tensor %s has %d experts, the plan asks for expert %d", f.Path, tensor, t.Shape[2], e)
		}
		src.Entry, src.NMat, src.Mat = pack.ExpertName(tensor, e), int(t.Shape[2]), e
	}
	first := int64(src.Mat) * int64(n)
	start, _ := f.DataRange(t)
	rb := t.RowBytes()
	h := artifacts.NewHasher()
	if _, err := io.Copy(h, io.NewSectionReader(f.ReaderAt(), start+first*rb, int64(n)*rb)); err != nil {
		return nil, fmt.Errorf("%s: reading tensor %s (%s): %w", f.Path, tensor, src.Entry, err)
	}
	src.Digest = artifacts.DigestOf(h)
	src.M = quant.Matrix{Name: src.Entry, Rows: n, Cols: k, Data: make([]float32, n*k)}
	if err := f.ReadRows(ctx, t, first, src.M.Data); err != nil {
		return nil, err
	}
	return src, nil
}

// imatrixImportance returns the importance of src from the imatrix file at path: mean x² per input
// channel of matrix src.Mat of src's tensor (llama-quantize's semantics). A missing file or entry, a
// K or expert-count mismatch, and a matrix no calibration token reached are errors naming the file,
// the tensor and what was expected.
func imatrixImportance(ctx context.Context, path, tensor string, src *finalizeSource) ([]float64, error) {
	row, err := calib.ReadImatrixRow(ctx, path, tensor, src.M.Cols, src.NMat, src.Mat)
	if err != nil {
		return nil, err
	}
	mean, err := row.Mean()
	if err != nil {
		return nil, fmt.Errorf("imatrix %s: %s: %w; its importance is unknown (use importance none for it, or an imatrix computed on more text)", path, src.Entry, err)
	}
	var sum float64
	for _, v := range mean {
		sum += v
	}
	if sum == 0 {
		return nil, fmt.Errorf("imatrix %s: %s: every mean x² is 0 (count %v), nothing to weight the clip search by", path, src.Entry, row.Count)
	}
	return mean, nil
}
