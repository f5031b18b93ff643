package stages

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"

	"orkpipe/artifacts"
	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/quant"
)

// FinalizeParams are the parameters of "finalize": how one weight of the source model is quantized.
// They hold only what changes the codes, scales and qerr (never the tile layout), so changing the
// layout never re-runs GPTQ. Method gptq binds input "hessian" (the Hessian of the weight's input,
// from calibrate); rtn binds none. N and K are the weight's shape (for the memory estimate; checked
// against the model).
type FinalizeParams struct {
	Tensor   string    `json:"tensor"`
	Method   string    `json:"method"` // gptq | rtn (| none for F16)
	DType    string    `json:"dtype"`
	Group    int       `json:"group"`
	Rotation string    `json:"rotation"` // none | hadamard
	ActBits  int       `json:"act_bits"`
	ClipGrid []float64 `json:"clip_grid"`
	Damp     float64   `json:"damp"`
	ActOrder bool      `json:"act_order"`
	Seed     uint64    `json:"seed"` // rotation sign seed
	N        int       `json:"n"`
	K        int       `json:"k"`
}

// DTypeBits returns the code width of a pack dtype name (16 for F16), or 0 if unknown.
func DTypeBits(dtype string) int {
	switch dtype {
	case "I4_NATIVE", "I4", "I4_ROT_A8":
		return 4
	case "I8", "I8_ROT":
		return 8
	case "F16":
		return 16
	}
	return 0
}

// PaddedK returns the stored row length of a weight of k inputs under the rotation (k when none).
func PaddedK(k int, rotation string) int {
	if rotation != "hadamard" {
		return k
	}
	r, err := quant.NewRotation(k, true, 0)
	if err != nil {
		return k
	}
	return r.Padded
}

// FinalizeMemory is the declared peak memory of a finalize node.
func FinalizeMemory(p FinalizeParams) int64 {
	n, k, kp := int64(p.N), int64(p.K), int64(PaddedK(p.K, p.Rotation))
	base := int64(64<<20) + n*k*4 + n*kp // float weight, codes
	switch {
	case p.Method == "gptq":
		// quant.GPTQ's peak. The Hessian as read is handed over (quant.WithConsumeHessian) and becomes
		// GPTQ's factorization buffer, except when rotation pads K: then both exist at once.
		mem := base + quant.GPTQMemory(p.N, p.K, int(kp), p.Group)
		if kp != k {
			mem += k * k * 8
		}
		return mem
	case DTypeBits(p.DType) == 16:
		return base + n*k*2
	default:
		return base + n*kp*4*3 // rotated copy, float64 row scratch
	}
}

func (p FinalizeParams) validate() error {
	bits := DTypeBits(p.DType)
	switch {
	case p.Tensor == "":
		return fmt.Errorf("tensor: empty")
	case bits == 0:
		return fmt.Errorf("dtype %q: want I4_NATIVE, I4, I4_ROT_A8, I8, I8_ROT or F16", p.DType)
	case bits == 16 && (p.Method != "none" || p.Group != 0 || p.Rotation != "none"):
		return fmt.Errorf("dtype F16: want method none, group 0, rotation none")
	case bits != 16 && p.Method != "gptq" && p.Method != "rtn":
		return fmt.Errorf("method %q: want gptq or rtn", p.Method)
	case p.Rotation != "none" && p.Rotation != "hadamard":
		return fmt.Errorf("rotation %q: want none or hadamard", p.Rotation)
	case !slices.Contains([]int{0, 32, 64, 128, 256, 512}, p.Group):
		return fmt.Errorf("group %d: want 0, 32, 64, 128, 256 or 512", p.Group)
	case p.N < 1 || p.K < 1:
		return fmt.Errorf("shape N=%d K=%d: want positive", p.N, p.K)
	}
	return nil
}

func init() {
	Register(Define("finalize", 1, func(p FinalizeParams) (Spec, error) {
		if err := p.validate(); err != nil {
			return Spec{}, err
		}
		s := Spec{Inputs: []string{"model"}, Outputs: []string{"weight"}, PeakMemory: FinalizeMemory(p)}
		if p.Method == "gptq" {
			s.Inputs = append(s.Inputs, "hessian")
		}
		return s, nil
	}, runFinalize))
}

// readWeightMatrix reads a 2-D tensor of the model as a float32 matrix (N x K) and the BLAKE3 of its
// raw bytes (streamed).
func readWeightMatrix(ctx context.Context, f *gguf.File, name string, n, k int) (quant.Matrix, artifacts.Digest, error) {
	t, err := f.Tensor(name)
	if err != nil {
		return quant.Matrix{}, artifacts.Digest{}, err
	}
	if len(t.Shape) != 2 || t.Shape[0] != int64(k) || t.Shape[1] != int64(n) {
		return quant.Matrix{}, artifacts.Digest{}, fmt.Errorf("%s: tensor %s has shape %v, the plan says [%d %d]", f.Path, name, t.Shape, k, n)
	}
	h := artifacts.NewHasher()
	if _, err := io.Copy(h, f.Section(t)); err != nil {
		return quant.Matrix{}, artifacts.Digest{}, fmt.Errorf("%s: reading tensor %s: %w", f.Path, name, err)
	}
	m := quant.Matrix{Name: name, Rows: n, Cols: k, Data: make([]float32, n*k)}
	if err := f.ReadRows(ctx, t, 0, m.Data); err != nil {
		return quant.Matrix{}, artifacts.Digest{}, err
	}
	return m, artifacts.DigestOf(h), nil
}

func runFinalize(ctx context.Context, p FinalizeParams, req Request) error {
	f, err := gguf.Open(ctx, req.Inputs["model"].Path)
	if err != nil {
		return err
	}
	defer f.Close()
	m, src, err := readWeightMatrix(ctx, f, p.Tensor, p.N, p.K)
	if err != nil {
		return err
	}
	meta := QWeightMeta{Name: p.Tensor, DType: p.DType, Method: p.Method, N: p.N, K: p.K, KP: p.K, Bits: DTypeBits(p.DType),
		Group: p.Group, ActBits: p.ActBits, Source: src.String()}
	if meta.Bits == 16 {
		q := &QWeight{Meta: meta, F16: make([]uint16, len(m.Data))}
		var num, den float64
		for i, v := range m.Data {
			q.F16[i] = gguf.F32ToF16(v)
			d := float64(gguf.F16ToF32(q.F16[i]) - v)
			num += d * d
			den += float64(v) * float64(v)
		}
		if den > 0 {
			q.Meta.QErr = math.Sqrt(num / den)
		}
		return WriteQWeight(req.Output("weight"), q)
	}
	grid := p.ClipGrid
	if len(grid) == 0 {
		grid = quant.DefaultClipGrid
	}
	opts := []quant.Option{quant.WithBits(meta.Bits), quant.WithGroup(p.Group), quant.WithClipGrid(grid)}
	if p.Rotation == "hadamard" {
		opts = append(opts, quant.WithRotation(true, p.Seed))
	}
	var w *quant.Weight
	if p.Method == "gptq" {
		hf, err := os.Open(req.Inputs["hessian"].Path)
		if err != nil {
			return err
		}
		ch, err := calib.ReadHessian(hf, req.Inputs["hessian"].Path)
		hf.Close()
		if err != nil {
			return err
		}
		if ch.K != p.K {
			return fmt.Errorf("Hessian %s is %dx%d, weight %s has K = %d", req.Inputs["hessian"].Path, ch.K, ch.K, p.Tensor, p.K)
		}
		qh := quant.Hessian(*ch)
		damp := p.Damp
		if damp == 0 {
			damp = 0.01
		}
		opts = append(opts, quant.WithDamping(damp, 0.01, 8), quant.WithActOrder(p.ActOrder), quant.WithConsumeHessian())
		if p.ActOrder && p.Group > 0 {
			opts = append(opts, quant.WithStaticGroups(true))
		}
		w, err = quant.GPTQ(ctx, m, &qh, opts...)
		if err != nil {
			return err
		}
	} else {
		w, err = quant.RTN(ctx, m, nil, opts...)
		if err != nil {
			return err
		}
	}
	meta.KP, meta.Rotation, meta.QErr = w.KP, w.Rotation, w.QErr
	return WriteQWeight(req.Output("weight"), &QWeight{Meta: meta, Codes: w.Codes, Scales: w.Scales})
}
