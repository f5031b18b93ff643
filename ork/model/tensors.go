package model

import (
	"fmt"
	"strconv"
	"strings"

	"orkpipe/ork/gguf"
)

// TensorSpec is one tensor the forward pass reads: its GGUF name, its shape in GGUF order (ne[0] first:
// K, N for a matrix; K, N, n_expert for an expert tensor) and whether it is a matmul weight of a site
// (held in its file encoding by a KeepEncoded source; expert tensors slice by slice).
type TensorSpec struct {
	Name   string
	Shape  []int
	Matmul bool
}

// Elements is the number of values of the tensor.
func (t TensorSpec) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// Tensors lists every tensor the forward pass reads, in the order of a converted GGUF file:
// token_embd, each block's (BlockTensors), the final norm and output. Tensors a model may have or not
// (output.weight with tied embeddings, the llama family's q/k norms and biases, rope_freqs) are listed
// as the forward pass needs them: output.weight is listed, the optional ones are not.
func (c *Config) Tensors() []TensorSpec {
	ts := []TensorSpec{{Name: "token_embd.weight", Shape: []int{c.NEmbd, c.NVocab}}}
	for l := 0; l < c.NLayer; l++ {
		ts = append(ts, c.BlockTensors(l)...)
	}
	out := "output_norm"
	if spec, ok := archSpecs[c.Arch]; ok {
		out = spec.outputNorm
	}
	return append(ts, TensorSpec{Name: out + ".weight", Shape: []int{c.NEmbd}}, TensorSpec{Name: "output.weight", Shape: []int{c.NEmbd, c.NVocab}})
}

// BlockTensors lists the tensors of block l: its two norms, every site weight (Config.Sites), and the
// other tensors its kind reads (q/k norms where the architecture requires them, convolution kernels,
// DeltaNet's ssm_dt.bias, ssm_a and ssm_norm, the MoE selection bias, the shared expert's gate vector).
func (c *Config) BlockTensors(l int) []TensorSpec {
	p := "blk." + strconv.Itoa(l) + "."
	spec := archSpecs[c.Arch]
	ffnNorm := "ffn_norm"
	if spec != nil {
		ffnNorm = spec.ffnNorm
	}
	vec := func(name string, n int) TensorSpec { return TensorSpec{Name: p + name, Shape: []int{n}} }
	ts := []TensorSpec{vec("attn_norm.weight", c.NEmbd), vec(ffnNorm+".weight", c.NEmbd)}
	k := c.Kind(l)
	switch k.Mixer {
	case MixerAttention, MixerGatedAttention:
		if spec != nil && spec.qkNorm {
			ts = append(ts, vec("attn_q_norm.weight", c.HeadDim), vec("attn_k_norm.weight", c.HeadDim))
		}
	case MixerDeltaNet:
		s := c.SSM
		ts = append(ts, TensorSpec{Name: p + "ssm_conv1d.weight", Shape: []int{s.ConvKernel, s.ConvDim()}},
			vec("ssm_dt.bias", s.VHeads), vec("ssm_a", s.VHeads), vec("ssm_norm.weight", s.HeadDim))
	case MixerShortConv:
		ts = append(ts, TensorSpec{Name: p + "shortconv.conv.weight", Shape: []int{c.ShortConvL, c.NEmbd}})
	}
	if k.FFN == FFNMoE {
		if c.ExpertBias {
			ts = append(ts, vec("exp_probs_b.bias", c.NExpert))
		}
		if c.NFFShared > 0 {
			ts = append(ts, vec("ffn_gate_inp_shexp.weight", c.NEmbd))
		}
	}
	for _, s := range c.Sites(l) {
		for _, w := range s.Weights {
			t := TensorSpec{Name: s.Tensor(l, w), Shape: []int{s.Width, w.N}, Matmul: true}
			if s.Experts > 0 {
				t.Shape = append(t.Shape, s.Experts)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// LayerWeightBytes is an upper bound of the memory a GGUFSource with KeepEncoded holds for the weights
// of block l while it is loaded: every site weight as WeightBytes (each slice of an expert tensor), the
// MoE router as float32, every other tensor of BlockTensors as float32, and for the llama family the
// optional q/k norms and q/k/v biases (qwen3, qwen2) as float32.
func (c *Config) LayerWeightBytes(l int) int64 {
	var b int64
	for _, t := range c.BlockTensors(l) {
		switch {
		case !t.Matmul, len(t.Shape) == 2 && isRouter(t.Name):
			b += 4 * t.Elements()
		case len(t.Shape) == 3:
			b += int64(t.Shape[2]) * c.WeightBytes(t.Shape[1], t.Shape[0])
		default:
			b += c.WeightBytes(t.Shape[1], t.Shape[0])
		}
	}
	if spec := archSpecs[c.Arch]; spec != nil && !spec.qkNorm && c.Kind(l).Mixer == MixerAttention {
		b += 4 * int64(2*c.HeadDim+c.QDim()+2*c.KVDim())
	}
	return b
}

// isRouter reports whether a block tensor is an MoE router (ffn_gate_inp).
func isRouter(name string) bool {
	n := len(name) - len(".ffn_gate_inp.weight")
	return n > 0 && name[n:] == ".ffn_gate_inp.weight"
}

// CheckTensors checks that f holds every tensor the forward pass reads (Tensors; output.weight may be
// absent where the embeddings are tied, as llama.cpp allows), each with the listed shape, before
// anything reads them: a file missing one (a shard of a split model, or experts a converter fused
// as ffn_gate_up_exps) or holding one of another shape is an error wrapping ErrBadModel that names
// the file and the first tensors at fault.
func (c *Config) CheckTensors(f *gguf.File) error {
	var bad []string
	n := 0
	for _, spec := range c.Tensors() {
		ti, err := f.Tensor(spec.Name)
		switch {
		case err != nil && spec.Name == "output.weight" && f.TensorIndex("token_embd.weight") >= 0:
			continue // tied embeddings
		case err != nil:
			n++
			if len(bad) < 4 {
				bad = append(bad, spec.Name+" missing")
			}
		case !sameShape(ti.Shape, spec.Shape):
			n++
			if len(bad) < 4 {
				bad = append(bad, fmt.Sprintf("%s has shape %v, want %v", spec.Name, ti.Shape, spec.Shape))
			}
		}
	}
	if n == 0 {
		return nil
	}
	more := ""
	if n > len(bad) {
		more = fmt.Sprintf(" and %d more", n-len(bad))
	}
	return fmt.Errorf("%s: %d of the tensors the %s forward pass reads are missing or of another shape: %s%s: %w",
		f.Path, n, c.Arch, strings.Join(bad, "; "), more, ErrBadModel)
}

// sameShape reports whether a file's shape is the listed one.
func sameShape(file []int64, want []int) bool {
	if len(file) != len(want) {
		return false
	}
	for i := range want {
		if file[i] != int64(want[i]) {
			return false
		}
	}
	return true
}
