package stages

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"

	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
	"orkpipe/ork/quant"
)

// ActSampleOutput returns the calibrate output holding the activation sample of the input site a block
// weight reads ("blk.3.ffn_up.weight" -> "a.3.ffn_gate_up", the site's name), and the layer; ok is false
// for a weight whose site calibrate does not sample (outside the blocks, or per expert).
func ActSampleOutput(s ModelShape, weight string) (name string, layer int, ok bool) {
	c := s.Config()
	l, in, _, ok := c.SiteOf(weight)
	if !ok || !calib.SampledSite(&c, l, in) {
		return "", 0, false
	}
	return actSampleName(l, c.Sites(l)[in].Name), l, true
}

func actSampleName(layer int, site string) string { return fmt.Sprintf("a.%d.%s", layer, site) }

// ActSampleMemory is what a calibrate node with ActSample = rows holds for its activation samples over
// layers [start, end) (calib.ActSampleMemory).
func ActSampleMemory(s ModelShape, start, end, nSeq, ctxLen, rows int) int64 {
	c := s.Config()
	return calib.ActSampleMemory(&c, calib.Window{Start: start, End: end}, nSeq, ctxLen, rows)
}

// ActSampleRows is how many rows a calibrate node with ActSample = rows keeps per site of nSeq
// sequences of ctxLen tokens (calib.SampleRows at calib.SampleStride).
func ActSampleRows(nSeq, ctxLen, rows int) int {
	return calib.SampleRows(nSeq, ctxLen, calib.SampleStride(nSeq, ctxLen, rows))
}

// actSampleOutputs lists the activation-sample outputs of block l ("a.<l>.<site>" for every sampled site).
func actSampleOutputs(s ModelShape, l int) []string {
	c := s.Config()
	var out []string
	for i, site := range c.Sites(l) {
		if calib.SampledSite(&c, l, model.Input(i)) {
			out = append(out, actSampleName(l, site.Name))
		}
	}
	return out
}

// writeActSamples writes every sample of sampler as calibrate output "a.<l>.<site>".
func writeActSamples(req Request, p CalibrateParams, c *model.Config, sampler *calib.ActSampler) error {
	for l := p.Start; l < p.End; l++ {
		for i, site := range c.Sites(l) {
			a := sampler.Sample(l, model.Input(i))
			if a == nil {
				continue
			}
			path := req.Output(actSampleName(l, site.Name))
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return err
			}
			bw := bufio.NewWriterSize(f, 1<<20)
			err = calib.WriteActSample(bw, a)
			if err == nil {
				err = bw.Flush()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("writing activation sample %s: %w", path, err)
			}
		}
	}
	return nil
}

// ActClipParams are the parameters of "act-clip": search the activation clip ratio of one finalized
// weight (input "weight") on the activation sample of its input site (input "acts", from calibrate),
// against the float weight of the source model (input "model"): quant.SearchActClip over Grid (each
// value rounded to float32 first, the precision the pack stores), the error summed over at most Channels
// output channels (0: all). The output "weight" is the input weight with its activation clip set; its
// codes and scales are unchanged.
type ActClipParams struct {
	Tensor   string    `json:"tensor"`
	N        int       `json:"n"`
	K        int       `json:"k"`
	KP       int       `json:"kp"` // the finalized weight's stored row length (K, or padded by its rotation)
	ActBits  int       `json:"act_bits"`
	Grid     []float64 `json:"grid"`
	Channels int       `json:"channels"`
	Rows     int       `json:"rows"` // the sample's rows at most (for the memory estimate)
}

// DefaultActClipChannels is how many output channels the act-clip stage sums the error over by default.
const DefaultActClipChannels = 512

// ActClipMemory is the declared peak memory of an act-clip node: 64 MiB for the process, the float
// weight (N·K·4) and the finalized weight as read (N·KP codes, scales), the sample (rows·K·4), its
// rotated copy and activation codes (rows·KP·5), the float product and one emulated output over the
// channels used (rows·C·(8+4)) and the copy of the channels' codes.
func ActClipMemory(p ActClipParams) int64 {
	n, k, kp, rows := int64(p.N), int64(p.K), int64(p.KP), int64(p.Rows)
	ch := n
	if p.Channels > 0 && int64(p.Channels) < n {
		ch = int64(p.Channels)
	}
	return 64<<20 + 4*n*k + n*kp + 4*n*(kp/32+1) + 4*rows*k + 5*rows*kp + 12*rows*ch + ch*kp + 4*ch*(kp/32+1)
}

func (p ActClipParams) validate() error {
	switch {
	case p.Tensor == "" || p.N < 1 || p.K < 1 || p.KP < p.K || p.Rows < 1:
		return fmt.Errorf("tensor %q, shape N=%d K=%d KP=%d, %d sample rows: want a tensor, positive sizes and KP >= K", p.Tensor, p.N, p.K, p.KP, p.Rows)
	case p.ActBits != 4 && p.ActBits != 8:
		return fmt.Errorf("act_bits %d: want 4 or 8 (F16 entries are not clipped)", p.ActBits)
	case len(p.Grid) == 0 || p.Channels < 0:
		return fmt.Errorf("grid of %d ratios, %d channels: want at least one ratio and channels >= 0", len(p.Grid), p.Channels)
	}
	for _, c := range p.Grid {
		if !(c > 0 && c <= 1) {
			return fmt.Errorf("grid ratio %v: want 0 < ratio <= 1", c)
		}
	}
	return nil
}

func init() {
	Register(Define("act-clip", 2, func(p ActClipParams) (Spec, error) {
		if err := p.validate(); err != nil {
			return Spec{}, err
		}
		return Spec{Inputs: []string{"model", "weight", "acts"}, Outputs: []string{"weight"}, PeakMemory: ActClipMemory(p)}, nil
	}, runActClip))
}

func runActClip(ctx context.Context, p ActClipParams, req Request) error {
	q, err := ReadQWeight(req.Inputs["weight"].Path)
	if err != nil {
		return err
	}
	m := q.Meta
	if m.N != p.N || m.K != p.K || m.KP != p.KP || m.ActBits != p.ActBits || m.Bits == 16 {
		return fmt.Errorf("finalized weight %s (%s): %s N=%d K=%d KP=%d act_bits %d, the plan says %s N=%d K=%d KP=%d act_bits %d",
			req.Inputs["weight"].Path, m.Name, m.DType, m.N, m.K, m.KP, m.ActBits, p.Tensor, p.N, p.K, p.KP, p.ActBits)
	}
	acts, err := calib.ReadActSampleFile(ctx, req.Inputs["acts"].Path)
	if err != nil {
		return err
	}
	if acts.K != p.K || acts.Rows > p.Rows {
		return fmt.Errorf("activation sample %s: %d rows of %d values, weight %s reads %d values (at most %d rows planned)",
			req.Inputs["acts"].Path, acts.Rows, acts.K, m.Name, p.K, p.Rows)
	}
	f, err := gguf.Open(ctx, req.Inputs["model"].Path)
	if err != nil {
		return err
	}
	defer f.Close()
	fs, err := readFinalizeSource(ctx, f, p.Tensor, nil, p.N, p.K)
	if err != nil {
		return err
	}
	if fs.Digest.String() != m.Source {
		return fmt.Errorf("model %s: tensor %s hashes to %s, the finalized weight %s was quantized from %s",
			req.Inputs["model"].Path, p.Tensor, fs.Digest, req.Inputs["weight"].Path, m.Source)
	}
	w := &quant.Weight{N: m.N, K: m.K, KP: m.KP, Bits: m.Bits, Group: m.Group, Rotation: m.Rotation, Codes: q.Codes, Scales: q.Scales}
	grid := make([]float64, len(p.Grid))
	for i, c := range p.Grid {
		grid[i] = float64(float32(c))
	}
	res, err := quant.SearchActClip(ctx, w, fs.M, acts.Data, acts.Rows, p.ActBits, grid, p.Channels, runtime.GOMAXPROCS(0))
	if err != nil {
		return err
	}
	best := 0
	for i, c := range grid {
		if c == res.Clip {
			best = i
			break
		}
	}
	slog.DebugContext(ctx, "act-clip", "weight", m.Name, "clip", res.Clip, "rel_err", math.Sqrt(res.Err[best]/res.Ref),
		"grid0", grid[0], "rel_err_grid0", math.Sqrt(res.Err[0]/res.Ref), "rows", acts.Rows, "channels", res.Channels)
	q.Meta.ActClip = float32(res.Clip)
	return WriteQWeight(req.Output("weight"), q)
}
