package calib

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"testing"

	"github.com/zeebo/blake3"

	"orkpipe/ork/board"
	"orkpipe/ork/model"
	"orkpipe/ork/pack"
	"orkpipe/ork/quant"
)

// int8Pack quantizes blocks [0, layers) of m's weights (int8 per channel, RTN) into an orkpack.
func int8Pack(t *testing.T, m *model.Model, layers int) *pack.Reader {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "w8.orkpack")
	w, err := pack.Create(ctx, path, board.Planner(board.RK3588()))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for l := 0; l < layers; l++ {
		for _, n := range []string{"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"} {
			name := fmt.Sprintf("blk.%d.%s.weight", l, n)
			lin, _, err := m.Src.Linear(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			d := lin.(*model.Dense)
			qw, err := quant.RTN(ctx, quant.Matrix{Name: name, Rows: d.N, Cols: d.K, Data: d.W}, nil, quant.WithBits(8))
			if err != nil {
				t.Fatal(err)
			}
			raw := make([]byte, 4*len(d.W))
			for i, v := range d.W {
				binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
			}
			pw := pack.Weight{Meta: pack.Meta{Name: name, DType: pack.I8, K: d.K, N: d.N, Group: qw.Group, QErr: qw.QErr, Source: blake3.Sum256(raw)},
				Codes: qw.Codes, Scales: qw.Scales}
			if err := w.Add(ctx, pw); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := pack.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestSequentialMode: Propagate with the quantized window produces exactly the hidden states the
// emulated (pack) model computes, which differ from the float ones; the next window's Hessians start
// from them.
func TestSequentialMode(t *testing.T) {
	ctx := context.Background()
	m, seqs := storiesModel(t)
	seqs = seqs[:3]
	p := int8Pack(t, m, 2)
	ps, err := model.NewPackSource(m.Src.(*model.GGUFSource), p)
	if err != nil {
		t.Fatal(err)
	}
	qm, err := model.NewModel(m.Cfg, ps)
	if err != nil {
		t.Fatal(err)
	}
	src, _ := NewEmbeddingSource(m, seqs)
	var buf bytes.Buffer
	hdr := src.Header()
	hdr.Layer = 2
	out, _ := NewHiddenWriter(&buf, hdr)
	if err := Propagate(ctx, qm, Window{Start: 0, End: 2}, src, out); err != nil {
		t.Fatal(err)
	}
	in, err := NewHiddenReader(bytes.NewReader(buf.Bytes()), "quantized.2")
	if err != nil {
		t.Fatal(err)
	}
	var diffFloat float64
	for s := 0; ; s++ {
		got, err := in.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		want, _ := qm.Embed(ctx, seqs[s])
		fl, _ := m.Embed(ctx, seqs[s])
		for l := 0; l < 2; l++ {
			ql, _ := model.LoadLayer(ctx, &m.Cfg, ps, l)
			fll, _ := model.LoadLayer(ctx, &m.Cfg, m.Src, l)
			qm.RunLayer(ctx, ql, want, nil)
			m.RunLayer(ctx, fll, fl, nil)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("sequence %d value %d: propagated %v, emulated model %v", s, i, got[i], want[i])
			}
			diffFloat = math.Max(diffFloat, math.Abs(float64(got[i]-fl[i])))
		}
	}
	if diffFloat == 0 {
		t.Fatal("quantized hidden states equal the float ones: the pack was not used")
	}
	t.Logf("sequential mode: hidden states at layer 2 differ from the float ones by up to %.4g", diffFloat)
	in2, _ := NewHiddenReader(bytes.NewReader(buf.Bytes()), "quantized.2")
	res, err := Capture(ctx, m, Window{Start: 2, End: 5}, in2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h := res.Hessian(2, model.InputQKV); h.Tokens != 3*128 {
		t.Fatalf("tokens %d", h.Tokens)
	}
}
