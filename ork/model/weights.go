package model

import (
	"context"
	"fmt"

	"orkpipe/ork/pack"
)

// WeightSource provides a model's tensors by their GGUF names. Implementations read lazily: nothing is
// loaded until asked for, so a model can be run one layer at a time.
type WeightSource interface {
	// Vector returns a one-dimensional tensor (norm weights, biases) as float32; ok is false when the
	// tensor does not exist.
	Vector(ctx context.Context, name string) (v []float32, ok bool, err error)
	// Linear returns a matmul weight (ne[0] = K inputs, ne[1] = N outputs) as a Linear without bias;
	// ok is false when the tensor does not exist.
	Linear(ctx context.Context, name string) (l Linear, ok bool, err error)
	// Rows copies rows (of ne[0] values each) of a two-dimensional tensor into dst, in the order given.
	Rows(ctx context.Context, name string, rows []int32, dst []float32) error
}

// Layer holds the weights of one transformer block.
type Layer struct {
	Index            int
	AttnNorm, FFNorm []float32
	QNorm, KNorm     []float32 // per-head RMSNorm of Q and K (qwen3), HeadDim values, or nil
	Q, K, V, O       Linear
	Gate, Up, Down   Linear // dense blocks; nil in MoE blocks
	// Router is ffn_gate_inp (NExpert outputs of NEmbd) and Experts the NExpert expert FFNs, in MoE
	// blocks (Config.MoE); both nil in dense blocks.
	Router  Linear
	Experts []Expert
}

// Expert is one expert FFN of an MoE block: slice e of ffn_gate_exps, ffn_up_exps and ffn_down_exps.
type Expert struct {
	Gate, Up, Down Linear
}

// linearWithBias wraps a Linear and adds a bias.
type linearWithBias struct {
	Linear
	bias []float32
}

func (l linearWithBias) Apply(y, x []float32) error {
	if err := l.Linear.Apply(y, x); err != nil {
		return err
	}
	n, _ := l.Dims()
	for t := 0; t < len(y); t += n {
		row := y[t : t+n]
		for i := range row {
			row[i] += l.bias[i]
		}
	}
	return nil
}

// LoadLayer reads block i from src and checks every shape against cfg.
func LoadLayer(ctx context.Context, cfg *Config, src WeightSource, i int) (*Layer, error) {
	if i < 0 || i >= cfg.NLayer {
		return nil, fmt.Errorf("layer %d: outside [0, %d): %w", i, cfg.NLayer, ErrBadModel)
	}
	p := fmt.Sprintf("blk.%d.", i)
	l := &Layer{Index: i}
	vec := func(name string, n int, required bool) ([]float32, error) {
		v, ok, err := src.Vector(ctx, p+name)
		if err != nil {
			return nil, err
		}
		if !ok {
			if required {
				return nil, fmt.Errorf("tensor %s%s: missing: %w", p, name, ErrBadModel)
			}
			return nil, nil
		}
		if len(v) != n {
			return nil, fmt.Errorf("tensor %s%s: %d values, want %d: %w", p, name, len(v), n, ErrBadModel)
		}
		return v, nil
	}
	lin := func(name string, n, k int, biasOK bool) (Linear, error) {
		w, ok, err := src.Linear(ctx, p+name+".weight")
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("tensor %s%s.weight: missing: %w", p, name, ErrBadModel)
		}
		if gn, gk := w.Dims(); gn != n || gk != k {
			return nil, fmt.Errorf("tensor %s%s.weight: %d rows of %d, want %d rows of %d: %w", p, name, gn, gk, n, k, ErrBadModel)
		}
		if !biasOK {
			return w, nil
		}
		b, err := vec(name+".bias", n, false)
		if err != nil || b == nil {
			return w, err
		}
		return linearWithBias{w, b}, nil
	}
	var err error
	e, q, kv := cfg.NEmbd, cfg.QDim(), cfg.KVDim()
	steps := []func() error{
		func() error { l.AttnNorm, err = vec("attn_norm.weight", e, true); return err },
		func() error { l.FFNorm, err = vec("ffn_norm.weight", e, true); return err },
		func() error { l.QNorm, err = vec("attn_q_norm.weight", cfg.HeadDim, false); return err },
		func() error { l.KNorm, err = vec("attn_k_norm.weight", cfg.HeadDim, false); return err },
		func() error { l.Q, err = lin("attn_q", q, e, true); return err },
		func() error { l.K, err = lin("attn_k", kv, e, true); return err },
		func() error { l.V, err = lin("attn_v", kv, e, true); return err },
		func() error { l.O, err = lin("attn_output", e, q, true); return err },
	}
	if !cfg.MoE() {
		steps = append(steps,
			func() error { l.Gate, err = lin("ffn_gate", cfg.NFF, e, false); return err },
			func() error { l.Up, err = lin("ffn_up", cfg.NFF, e, false); return err },
			func() error { l.Down, err = lin("ffn_down", e, cfg.NFF, false); return err },
		)
	} else {
		steps = append(steps, func() error { l.Router, err = lin("ffn_gate_inp", cfg.NExpert, e, false); return err })
		l.Experts = make([]Expert, cfg.NExpert)
		for x := range l.Experts {
			ex := &l.Experts[x]
			steps = append(steps,
				func() error { ex.Gate, err = expertLin(ctx, src, p+"ffn_gate_exps.weight", x, cfg.NFF, e); return err },
				func() error { ex.Up, err = expertLin(ctx, src, p+"ffn_up_exps.weight", x, cfg.NFF, e); return err },
				func() error { ex.Down, err = expertLin(ctx, src, p+"ffn_down_exps.weight", x, e, cfg.NFF); return err },
			)
		}
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// expertLin reads expert x of the expert tensor named tensor and checks its shape (n rows of k).
func expertLin(ctx context.Context, src WeightSource, tensor string, x, n, k int) (Linear, error) {
	name := pack.ExpertName(tensor, x)
	w, ok, err := src.Linear(ctx, name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("tensor %s (expert %d of an MoE block): missing: %w", tensor, x, ErrBadModel)
	}
	if gn, gk := w.Dims(); gn != n || gk != k {
		return nil, fmt.Errorf("%s: %d rows of %d, want %d rows of %d: %w", name, gn, gk, n, k, ErrBadModel)
	}
	return w, nil
}
