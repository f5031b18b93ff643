package stages

import (
	"slices"

	"orkpipe/ork/calib"
	"orkpipe/ork/model"
	"orkpipe/ork/pack"
	"orkpipe/ork/tile"
)

// The sizes of the large outputs of a node, from its parameters alone, for the planner's estimate of
// what a build writes into the store (engine.Node.Writes). Each is the file's exact size but for its
// JSON header (metaBytes: a few hundred bytes); the outputs these functions leave out are at most a
// few MiB (routing statistics, reports, checksums).

// metaBytes stands for a weight file's JSON header.
const metaBytes = 512

// OutputBytes is the size of calibrate's outputs: a Hessian file per captured site of the window's
// blocks not in Skip (one per expert of an expert site), the activation samples with ActSample, and
// the hidden states at End with Hidden.
func (p CalibrateParams) OutputBytes() int64 {
	c := p.Shape.Config()
	rows := min(int64(p.ActSample), int64(p.Sequences)*int64(p.Ctx))
	var n int64
	for l := p.Start; l < p.End; l++ {
		for i, site := range c.Sites(l) {
			if calib.Captured(site) && !slices.Contains(p.Skip, siteOutput(l, site)) {
				n += calib.HessianFileSize(site.Width) * int64(max(1, site.Experts))
			}
			if p.ActSample > 0 && calib.SampledSite(&c, l, model.Input(i)) {
				n += calib.ActSampleFileSize(site.Width, int(rows))
			}
		}
	}
	if p.Hidden {
		n += hiddenBytes(c.NEmbd, p.Sequences, p.Ctx)
	}
	return n
}

// OutputBytes is the size of tokenize's output: a 16-byte header, the sequences' tokens as int32,
// the digest.
func (p TokenizeParams) OutputBytes() int64 {
	return 16 + 4*int64(p.Sequences)*int64(p.Ctx) + 32
}

// OutputBytes is the size of propagate's output: the hidden states at End.
func (p PropagateParams) OutputBytes() int64 {
	return hiddenBytes(p.Shape.Config().NEmbd, p.Sequences, p.Ctx)
}

func hiddenBytes(nEmbd, nSeq, ctx int) int64 {
	return calib.HiddenHeader{NEmbd: nEmbd, SeqLen: ctx, NSeq: nSeq}.FileBytes()
}

// OutputBytes is the size of finalize's (and act-clip's) finalized weight file: int4 codes two a
// byte, int8 codes a byte, a float32 scale a group, or float16 values.
func (p FinalizeParams) OutputBytes() int64 {
	return 16 + metaBytes + p.meta().payloadBytes() + 32
}

// TiledBytes is the size of the tiled entry (tile's and rtn-tile's output) of the weight p
// finalizes: its scales and its codes as the pack lays them out (tile.Layout).
func (p FinalizeParams) TiledBytes() int64 {
	codes, scales := p.tiled()
	return 16 + metaBytes + 16 + scales + 8 + codes
}

// PackBytes is what the weight p finalizes takes in a pack: its codes, then its scales padded to
// the page (pack.Geometry).
func (p FinalizeParams) PackBytes() int64 {
	codes, scales := p.tiled()
	return codes + (scales+pack.PageSize-1)/pack.PageSize*pack.PageSize
}

// tiled is the size of the tiled codes and of the scales of the weight p finalizes.
func (p FinalizeParams) tiled() (codes, scales int64) {
	m := p.meta()
	if m.Bits != 16 {
		scales = 4 * int64(m.N) * int64(m.Groups())
	}
	dt, err := pack.ParseDType(p.DType)
	if err != nil {
		return 0, scales
	}
	l, err := tile.New(dt.Kind(), m.KP, m.N, tile.WithSegmentK(tile.DefaultSegmentK), tile.WithPageSize(pack.PageSize))
	if err != nil {
		return int64(m.N) * int64(m.KP) * int64(m.Bits) / 8, scales // the planner has checked the shapes
	}
	return int64(l.Size()), scales
}

// meta is the geometry of the weight file p makes (bits 0 for a dtype ParseDType rejects: the
// planner has checked them).
func (p FinalizeParams) meta() QWeightMeta {
	m := QWeightMeta{N: p.N, K: p.K, KP: p.KP(), Group: p.Group}
	if dt, err := pack.ParseDType(p.DType); err == nil {
		m.Bits = dt.Bits()
	}
	return m
}
