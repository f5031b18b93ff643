package model

import "fmt"

// shortConv is LFM2's short convolution mixer (llama.cpp lfm2.cpp build_shortconv_block): from x (the
// attn_norm output), B | C | X = shortconv.in_proj·x (NEmbd values each); per sequence B⊙X is convolved
// causally over time per channel (shortconv.conv, ShortConvL taps, zero history, no activation), and
// shortconv.out_proj reads C ⊙ conv; the result is written into x.
func (m *Model) shortConv(l *Layer, x []float32, seqLen int, s *scratch, obs Observer) error {
	e := m.Cfg.NEmbd
	rows := len(x) / e
	sc := l.ShortConv
	bcx := s.buf(sBCX, 3*rows*e)
	if err := sc.InProj.Apply(bcx, x); err != nil {
		return fmt.Errorf("blk.%d.shortconv.in_proj: %w", l.Index, err)
	}
	bx, y := s.buf(sBX, rows*e), s.buf(sY, rows*e)
	for r := 0; r < rows; r++ {
		b, xx := bcx[3*r*e:(3*r+1)*e], bcx[(3*r+2)*e:(3*r+3)*e]
		for i := range b {
			bx[r*e+i] = b[i] * xx[i]
		}
	}
	for r0 := 0; r0 < rows; r0 += seqLen {
		causalConv(bx[r0*e:(r0+seqLen)*e], sc.Conv, e, m.Cfg.ShortConvL, false, m.GGMLExact)
	}
	for r := 0; r < rows; r++ {
		cc := bcx[(3*r+1)*e : (3*r+2)*e]
		for i, v := range cc {
			y[r*e+i] = v * bx[r*e+i]
		}
	}
	if obs != nil {
		obs.Observe(l.Index, InputAttnO, y)
	}
	if err := sc.OutProj.Apply(x, y); err != nil {
		return fmt.Errorf("blk.%d.shortconv.out_proj: %w", l.Index, err)
	}
	return nil
}
