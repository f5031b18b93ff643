package calib

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"orkpipe/ork/gguf"
)

func sortedEntries(entries []*ImatrixEntry) ([]*ImatrixEntry, error) {
	out := slices.Clone(entries)
	slices.SortFunc(out, func(a, b *ImatrixEntry) int { return strings.Compare(a.Name, b.Name) })
	for i, e := range out {
		if e.Name == "" || e.K < 1 || len(e.Sum2) == 0 || len(e.Counts) != len(e.Sum2) {
			return nil, fmt.Errorf("imatrix entry %q: K %d, %d matrices, %d counts: want a name, K >= 1 and one count per matrix", e.Name, e.K, len(e.Sum2), len(e.Counts))
		}
		for m, row := range e.Sum2 {
			if len(row) != e.K {
				return nil, fmt.Errorf("imatrix entry %s: matrix %d has %d values, want K=%d", e.Name, m, len(row), e.K)
			}
		}
		if i > 0 && out[i-1].Name == e.Name {
			return nil, fmt.Errorf("imatrix entry %s given twice", e.Name)
		}
	}
	return out, nil
}

// WriteImatrixGGUF writes entries in llama.cpp's GGUF imatrix form (general.type "imatrix",
// imatrix.datasets, imatrix.chunk_count, and per weight <name>.in_sum2 F32 [K, n_mat] and
// <name>.counts F32 [1, n_mat]), in name order, so that the same entries give the same bytes.
func WriteImatrixGGUF(ctx context.Context, w io.Writer, entries []*ImatrixEntry, datasets []string, chunkCount int) error {
	es, err := sortedEntries(entries)
	if err != nil {
		return err
	}
	hdr := gguf.Header{KV: []gguf.KV{{Key: "general.type", Value: gguf.String("imatrix")},
		{Key: "imatrix.datasets", Value: gguf.Strings(datasets)},
		{Key: "imatrix.chunk_count", Value: gguf.Uint32(uint32(chunkCount))}}}
	byName := map[string]*ImatrixEntry{}
	for _, e := range es {
		n := int64(len(e.Sum2))
		hdr.Tensors = append(hdr.Tensors,
			gguf.TensorInfo{Name: e.Name + ".in_sum2", Type: gguf.TypeF32, Shape: []int64{int64(e.K), n}},
			gguf.TensorInfo{Name: e.Name + ".counts", Type: gguf.TypeF32, Shape: []int64{1, n}})
		byName[e.Name] = e
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	_, err = gguf.Write(ctx, bw, hdr, func(_ context.Context, _ int, t gguf.TensorInfo, tw io.Writer) error {
		if base, ok := strings.CutSuffix(t.Name, ".counts"); ok {
			return writeF32s(tw, byName[base].Counts)
		}
		for _, row := range byName[strings.TrimSuffix(t.Name, ".in_sum2")].Sum2 {
			if err := writeF32s(tw, row); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

// WriteLegacyImatrix writes entries in llama.cpp's legacy .dat form: per weight its name, ncall and
// one row of n_mat·K values mean(x²)·ncall (mean = Sum2/Counts of each matrix), then ncall as the
// last call count and the dataset name.
func WriteLegacyImatrix(w io.Writer, entries []*ImatrixEntry, ncall int, dataset string) error {
	es, err := sortedEntries(entries)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	put := func(v int32) { binary.Write(bw, binary.LittleEndian, v) }
	put(int32(len(es)))
	for _, e := range es {
		put(int32(len(e.Name)))
		bw.WriteString(e.Name)
		put(int32(ncall))
		put(int32(e.K * len(e.Sum2)))
		for m, row := range e.Sum2 {
			c := e.Counts[m]
			for _, v := range row {
				x := 0.0
				if c > 0 {
					x = v / c * float64(ncall)
				}
				binary.Write(bw, binary.LittleEndian, float32(x))
			}
		}
	}
	put(int32(ncall))
	put(int32(len(dataset)))
	bw.WriteString(dataset)
	return bw.Flush()
}

func writeF32s(w io.Writer, v []float64) error {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(x)))
	}
	_, err := w.Write(b)
	return err
}
