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
	var nib uint64
	if nibbles == "high-first" && pw.DType.Int4() {
		pw.Nibbles, nib = tile.HighFirst, 1
	}
	_, codes, err := pack.TileWeight(pw, 0)
	if err != nil {
		return fmt.Errorf("tiling %s: %w", q.Meta.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	meta, err := json.Marshal(q.Meta)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	put := func(v uint64) {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		bw.Write(b[:])
	}
	bw.Write(entryMagic[:])
	put(uint64(len(meta)))
	bw.Write(meta)
	put(nib)
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
