package stages

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"

	"orkpipe/artifacts"
	"orkpipe/ork/pack"
	"orkpipe/ork/tile"
)

// TileParams are the parameters of "tile": the layout choices that change the bytes but never the
// quantized values, so changing them re-runs tile and what follows, never finalize.
type TileParams struct {
	Nibbles string `json:"nibbles"` // int4 nibble order: low-first | high-first
	N       int    `json:"n"`       // weight shape, for the memory estimate
	KP      int    `json:"kp"`
}

func nibbleOrder(v uint64) tile.NibbleOrder {
	if v == 1 {
		return tile.HighFirst
	}
	return tile.LowFirst
}

func init() {
	Register(Define("tile", 1, func(p TileParams) (Spec, error) {
		if p.Nibbles != "low-first" && p.Nibbles != "high-first" {
			return Spec{}, fmt.Errorf("nibbles %q: want low-first or high-first", p.Nibbles)
		}
		if p.N < 1 || p.KP < 1 {
			return Spec{}, fmt.Errorf("shape N=%d KP=%d: want positive", p.N, p.KP)
		}
		n, kp := int64(p.N), int64(p.KP)
		// the weight file (codes + scales) and the tiled codes, with tile padding
		return Spec{Inputs: []string{"weight"}, Outputs: []string{"entry"}, PeakMemory: 32<<20 + 2*(n+64)*(kp+32)*2 + n*kp/4}, nil
	}, runTile))
}

func runTile(ctx context.Context, p TileParams, req Request) error {
	q, err := ReadQWeight(req.Inputs["weight"].Path)
	if err != nil {
		return err
	}
	return writeTiledEntry(ctx, req.Output("entry"), q, p.Nibbles)
}

// writeTiledEntry tiles the finalized weight q (nibble order nibbles for int4 dtypes) and writes it
// to path (which must not exist) in the tiled-entry format.
func writeTiledEntry(ctx context.Context, path string, q *QWeight, nibbles string) error {
	if err := q.Meta.validate(); err != nil {
		return err
	}
	pw, err := q.PackWeight()
	if err != nil {
		return err
	}
	pw.Nibbles = entryNibbles(pw.DType, nibbles)
	_, codes, err := pack.TileWeight(pw, 0)
	if err != nil {
		return fmt.Errorf("tiling %s: %w", q.Meta.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return writeEntryFile(path, q, pw.Nibbles, codes)
}

// entryNibbles is the nibble order of a dtype's tiled codes: high-first only for an int4 dtype asked
// for it.
func entryNibbles(dt pack.DType, nibbles string) tile.NibbleOrder {
	if nibbles == "high-first" && dt.Int4() {
		return tile.HighFirst
	}
	return tile.LowFirst
}

// tiledCodes is a weight's codes region laid out as it is quantized (rtn-tile): the layout pack
// gives the weight's geometry, and its bytes, filled by the quantizer's sink row by row.
type tiledCodes struct {
	layout tile.Layout
	nib    tile.NibbleOrder
	codes  []byte
}

// newTiledCodes lays out the codes region of the weight m will describe (its KP set; its rotation,
// which the geometry does not depend on, not yet) in nibble order nibbles, its padding already zero.
// write checks the layout against the finished weight's pack.Geometry.
func newTiledCodes(m QWeightMeta, nibbles string) (*tiledCodes, error) {
	dt, err := pack.ParseDType(m.DType)
	if err != nil {
		return nil, err
	}
	nib := entryNibbles(dt, nibbles)
	l, err := tile.New(dt.Kind(), m.KP, m.N, tile.WithSegmentK(tile.DefaultSegmentK), tile.WithNibbleOrder(nib), tile.WithPageSize(pack.PageSize))
	if err != nil {
		return nil, fmt.Errorf("tiling %s: %w", m.Name, err)
	}
	// The buffer comes from the process's pool (getBuffer), sized for the whole pack entry (codes and
	// scales, page-padded) that verify-local will read into it. rtn-tile declares the row-major codes
	// (N·KP bytes, FinalizeMemory) it never allocates besides the tiled ones (RTNTileMemory): a pooled
	// buffer of up to twice the entry stays inside that.
	pm, err := m.PackMeta()
	if err != nil {
		return nil, err
	}
	// pack.Geometry's Length (the codes, then the scales to a whole page), before the rotation
	// Geometry checks is known.
	size := int64(l.Size()) + (4*int64(pm.N)*int64(pm.Groups())+pack.PageSize-1)/pack.PageSize*pack.PageSize
	codes, err := getBuffer(l.Size(), int(size), int(2*size))
	if err != nil {
		return nil, fmt.Errorf("tiling %s: %w", m.Name, err)
	}
	t := &tiledCodes{layout: l, nib: nib, codes: codes}
	if err := l.ClearPadding(t.codes); err != nil {
		t.release()
		return nil, err
	}
	return t, nil
}

// release hands the codes buffer on to later nodes (putBuffer); t is not used afterwards.
func (t *tiledCodes) release() {
	putBuffer(t.codes)
	t.codes = nil
}

// sink tiles rows of codes into place (quant.CodeSink).
func (t *tiledCodes) sink(first int, codes []int8) error {
	return t.layout.TileRows(t.codes, first, codes)
}

// write writes the finalized weight q, whose codes the sink received, to path in the tiled-entry
// format, after checking that q's geometry is the one the codes were laid out in.
func (t *tiledCodes) write(ctx context.Context, path string, q *QWeight) error {
	if err := q.Meta.validate(); err != nil {
		return err
	}
	pm, err := q.Meta.PackMeta()
	if err != nil {
		return err
	}
	pm.Nibbles = t.nib
	e, err := pack.Geometry(pm, 0)
	if err != nil {
		return err
	}
	l, err := e.Layout()
	if err != nil {
		return err
	}
	if l.String() != t.layout.String() || l.NibbleOrder() != t.layout.NibbleOrder() {
		return fmt.Errorf("tiling %s: the weight is %s, its codes were laid out as %s", q.Meta.Name, l, t.layout)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return writeEntryFile(path, q, t.nib, t.codes)
}

// writeEntryFile writes q's meta and scales and the tiled codes (in nibble order nib) to path (which
// must not exist) in the tiled-entry format.
func writeEntryFile(path string, q *QWeight, nib tile.NibbleOrder, codes []byte) error {
	meta, err := json.Marshal(q.Meta)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, writeBufSize(int64(len(meta)+len(q.Scales)*4+64))) // the codes go past it
	put := func(v uint64) {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		bw.Write(b[:])
	}
	bw.Write(entryMagic[:])
	put(uint64(len(meta)))
	bw.Write(meta)
	put(uint64(nib))
	put(uint64(len(q.Scales) * 4))
	err = writeFloat32s(bw, q.Scales)
	put(uint64(len(codes)))
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		_, err = f.Write(codes) // whole, past the buffer
	}
	if err == nil {
		artifacts.StartWriteback(f, 0, 0) // the store fsyncs it when it adopts the entry
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing tiled entry %s: %w", path, err)
	}
	return nil
}
