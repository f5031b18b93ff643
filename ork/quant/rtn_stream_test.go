package quant

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// matrixReader serves a Matrix's rows as a RowReader (a copy, as a file reader would).
type matrixReader struct{ m Matrix }

func (r matrixReader) ReadRows(_ context.Context, first int, dst []float32) error {
	copy(dst, r.m.Data[first*r.m.Cols:])
	return nil
}

// TestRTNStreamMatchesRTN: streamed rows give RTN's (RTNImportance's) weight bit for bit, with and
// without rotation, on one and several workers, whatever the chunking.
func TestRTNStreamMatchesRTN(t *testing.T) {
	for _, tc := range []struct {
		name       string
		n, k       int
		opts       []Option
		importance bool
	}{
		{"g32", 70, 96, []Option{WithGroup(32)}, false},
		{"per channel int8", 33, 160, []Option{WithBits(8), WithGroup(0)}, false},
		{"rotated padded", 40, 172, []Option{WithRotation(true, 9)}, false},
		{"no clip", 50, 64, []Option{WithClipGrid([]float64{1})}, false},
		{"imatrix", 64, 128, []Option{WithGroup(64)}, true},
		{"wide rows", 9, 70000, []Option{WithGroup(32)}, false}, // more than rtnChunkBytes per row
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := SyntheticWeight("w", tc.n, tc.k, 3)
			if err != nil {
				t.Fatal(err)
			}
			var imp []float64
			if tc.importance {
				imp = make([]float64, tc.k)
				for i := range imp {
					imp[i] = 0.1 + float64(i%7)
				}
			}
			var want *Weight
			if imp != nil {
				want, err = RTNImportance(context.Background(), m, imp, tc.opts...)
			} else {
				want, err = RTN(context.Background(), m, nil, tc.opts...)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, workers := range []int{1, 3} {
				got, err := RTNStream(context.Background(), "w", tc.n, tc.k, matrixReader{m}, imp, append(slices.Clone(tc.opts), WithWorkers(workers))...)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.Codes, want.Codes) || !slices.Equal(got.Scales, want.Scales) || got.KP != want.KP ||
					got.Rotation != want.Rotation || math.Float64bits(got.QErr) != math.Float64bits(want.QErr) {
					t.Fatalf("workers %d: streamed weight differs (qerr %v vs %v)", workers, got.QErr, want.QErr)
				}
				// RTNStreamTo: the same codes through the sink, each row exactly once, and the rest
				// of the weight unchanged.
				codes, seen := make([]int8, len(want.Codes)), make([]atomic.Int32, tc.n)
				sunk, err := RTNStreamTo(context.Background(), "w", tc.n, tc.k, matrixReader{m}, imp, func(first int, c []int8) error {
					copy(codes[first*want.KP:], c)
					for r := range len(c) / want.KP {
						seen[first+r].Add(1)
					}
					return nil
				}, append(slices.Clone(tc.opts), WithWorkers(workers))...)
				if err != nil {
					t.Fatal(err)
				}
				for r := range seen {
					if seen[r].Load() != 1 {
						t.Fatalf("workers %d: row %d sunk %d times", workers, r, seen[r].Load())
					}
				}
				if sunk.Codes != nil || !slices.Equal(codes, want.Codes) || !slices.Equal(sunk.Scales, want.Scales) || sunk.KP != want.KP ||
					sunk.Rotation != want.Rotation || math.Float64bits(sunk.QErr) != math.Float64bits(want.QErr) {
					t.Fatalf("workers %d: weight through the sink differs (qerr %v vs %v)", workers, sunk.QErr, want.QErr)
				}
			}
		})
	}
}

func TestRTNStreamRefusesNonFinite(t *testing.T) {
	m, err := SyntheticWeight("w", 20, 64, 1)
	if err != nil {
		t.Fatal(err)
	}
	m.Data[13*64+5] = float32(math.Inf(-1))
	if _, err := RTNStream(context.Background(), "w", 20, 64, matrixReader{m}, nil); !errors.Is(err, ErrNotFinite) {
		t.Fatalf("err %v, want ErrNotFinite", err)
	} else if want := "row 13 col 5"; !strings.Contains(err.Error(), want) {
		t.Fatalf("err %q does not name %q", err, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RTNStream(ctx, "w", 20, 64, matrixReader{m}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err %v", err)
	}
}

// TestRTNStreamToSinkError: the sink's error ends the quantization and is returned; no sink is a
// parameter error.
func TestRTNStreamToSinkError(t *testing.T) {
	m, err := SyntheticWeight("w", 40, 64, 1)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	if _, err := RTNStreamTo(context.Background(), "w", 40, 64, matrixReader{m}, nil, func(int, []int8) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v, want the sink's", err)
	}
	if _, err := RTNStreamTo(context.Background(), "w", 40, 64, matrixReader{m}, nil, nil); !errors.Is(err, ErrParam) {
		t.Fatalf("nil sink: err %v, want ErrParam", err)
	}
}
