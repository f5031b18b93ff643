package stages

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"orkpipe/artifacts"
	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
	"orkpipe/ork/quant"
)

// finalizeSource is the matrix one finalize node quantizes: a 2-D weight, or one expert slice of
// an MoE expert tensor.
type finalizeSource struct {
	M      quant.Matrix     // the rows as float32 (readFinalizeSource only; RTN streams them: ReadRows)
	Digest artifacts.Digest // BLAKE3 of exactly the source bytes of the matrix (the whole tensor, or the slice)
	Entry  string           // the pack entry name: the tensor name, or "<name>#<e>"
	NMat   int              // matrices in the tensor: 1, or n_expert
	Mat    int              // which one it is
	N, K   int

	f     *gguf.File
	t     gguf.TensorInfo
	first int64 // the matrix's first row among the tensor's rows
}

// openFinalizeSource locates weight tensor of f as an N x K matrix and hashes its bytes, without
// reading it as floats. With expert nil the tensor must be 2-D [K, N] (GGUF ne order). With expert
// e it must be a 3-D MoE expert tensor [K, N, n_expert] (llama.cpp's ffn_*_exps layout), and the
// matrix is expert e: rows [e·N, (e+1)·N) of its N·n_expert rows, contiguous in the file. Only
// those rows are read and hashed.
func openFinalizeSource(ctx context.Context, f *gguf.File, tensor string, expert *int, n, k int) (*finalizeSource, error) {
	t, err := f.Tensor(tensor)
	if err != nil {
		return nil, err
	}
	src := &finalizeSource{Entry: tensor, NMat: 1, N: n, K: k, f: f, t: t}
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
	src.first = int64(src.Mat) * int64(n)
	start, _ := f.DataRange(t)
	rb := t.RowBytes()
	if src.Digest, err = hashSection(ctx, f, start+src.first*rb, int64(n)*rb); err != nil {
		return nil, fmt.Errorf("%s: reading tensor %s (%s): %w", f.Path, tensor, src.Entry, err)
	}
	return src, nil
}

// ReadRows reads rows [first, first+len(dst)/K) of the matrix as float32 (quant.RowReader).
func (s *finalizeSource) ReadRows(ctx context.Context, first int, dst []float32) error {
	return s.f.ReadRows(ctx, s.t, s.first+int64(first), dst)
}

// readFinalizeSource is openFinalizeSource with the matrix read whole into M.
func readFinalizeSource(ctx context.Context, f *gguf.File, tensor string, expert *int, n, k int) (*finalizeSource, error) {
	src, err := openFinalizeSource(ctx, f, tensor, expert, n, k)
	if err != nil {
		return nil, err
	}
	src.M = quant.Matrix{Name: src.Entry, Rows: n, Cols: k, Data: make([]float32, n*k)}
	// On up to 8 cores (the fresh matrix's page faults cost about as much as the dequantization):
	// 8 MiB of chunk buffers at most, within FinalizeMemory's 64 MiB for file buffers.
	if err := f.ReadRowsOn(ctx, src.t, src.first, src.M.Data, min(8, runtime.GOMAXPROCS(0))); err != nil {
		return nil, err
	}
	return src, nil
}

// hashSection returns the BLAKE3 of the n bytes of f's file at off (artifacts.HashSection: pieces
// mapped, on all CPUs).
func hashSection(ctx context.Context, f *gguf.File, off, n int64) (artifacts.Digest, error) {
	osf, ok := f.ReaderAt().(*os.File)
	if !ok {
		return artifacts.Digest{}, fmt.Errorf("%s: tensor data is not read from a file (gguf.Open)", f.Path)
	}
	return artifacts.HashSection(ctx, osf, off, n)
}

// imatrixImportance returns the importance of src from the imatrix file at path: mean x² per input
// channel of matrix src.Mat of src's tensor (llama-quantize's semantics). A missing file or entry, a
// K or expert-count mismatch, and a matrix no calibration token reached are errors naming the file,
// the tensor and what was expected.
func imatrixImportance(ctx context.Context, path, tensor string, src *finalizeSource) ([]float64, error) {
	row, err := calib.ReadImatrixRow(ctx, path, tensor, src.K, src.NMat, src.Mat)
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
