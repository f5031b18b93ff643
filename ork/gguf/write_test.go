package gguf

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

func TestWriteSynthetic(t *testing.T) {
	ctx := context.Background()
	rows := [][]float32{}
	for r := 0; r < 3; r++ {
		row := make([]float32, 64)
		for i := range row {
			row[i] = float32(math.Sin(float64(r*64+i))) * 3
		}
		rows = append(rows, row)
	}
	h := Header{KV: []KV{{"general.architecture", String("llama")}, {"x.list", Int32s([]int32{1, -2})}, {AlignmentKey, Uint32(64)}},
		Tensors: []TensorInfo{
			{Name: "a.q8", Type: TypeQ8_0, Shape: []int64{64, 3}},
			{Name: "a.bf16", Type: TypeBF16, Shape: []int64{64, 3}},
			{Name: "a.f32", Type: TypeF32, Shape: []int64{64, 3}},
		}}
	var buf bytes.Buffer
	l, err := Write(ctx, &buf, h, func(_ context.Context, _ int, ti TensorInfo, w io.Writer) error {
		out := make([]byte, ti.RowBytes())
		for _, row := range rows { // row by row, as synth does
			if err := Quantize(ti.Type, row, out); err != nil {
				return err
			}
			if _, err := w.Write(out); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != l.Size || l.Size%64 != 0 || l.DataOffset%64 != 0 {
		t.Fatalf("wrote %d bytes, layout %+v", buf.Len(), l)
	}
	f, err := Parse(ctx, bytes.NewReader(buf.Bytes()), int64(buf.Len()), "synthetic")
	if err != nil {
		t.Fatal(err)
	}
	// Q8_0: 3 rows * 2 blocks * 34 = 204 bytes, padded to 256; BF16: 384 bytes.
	if f.Alignment != 64 || len(f.Tensors) != 3 || f.Tensors[1].Offset != 256 || f.Tensors[2].Offset != 640 {
		t.Fatalf("alignment %d, tensors %+v", f.Alignment, f.Tensors)
	}
	for _, ti := range f.Tensors {
		got := make([]float32, 64*3)
		if err := f.ReadRows(ctx, ti, 0, got); err != nil {
			t.Fatal(err)
		}
		for r, row := range rows {
			for i, x := range row {
				e := math.Abs(float64(got[r*64+i] - x))
				var bound float64
				switch ti.Type {
				case TypeQ8_0:
					bound = 3.0 / 127 // half a step of amax/127 with amax <= 3, plus f16 slack
				case TypeBF16:
					bound = math.Abs(float64(x)) * 0x1p-8
				}
				if e > bound {
					t.Fatalf("%s[%d][%d] = %g, want %g (bound %g)", ti.Name, r, i, got[r*64+i], x, bound)
				}
			}
		}
	}
	if v, _ := f.Get("x.list"); v.Len() != 2 {
		t.Errorf("x.list = %v", v)
	}
}

func TestWriteRejects(t *testing.T) {
	ctx := context.Background()
	one := []TensorInfo{{Name: "w", Type: TypeF32, Shape: []int64{4}}}
	writeN := func(n int) TensorData {
		return func(_ context.Context, _ int, _ TensorInfo, w io.Writer) error {
			_, err := w.Write(make([]byte, n))
			return err
		}
	}
	cases := []struct {
		name string
		h    Header
		data TensorData
		want string
	}{
		{"short data", Header{Tensors: one}, writeN(15), "wrote 15 bytes, expected 16"},
		{"long data", Header{Tensors: one}, writeN(17), "more than the tensor's 16 bytes"},
		{"duplicate key", Header{KV: []KV{{"k", Uint8(1)}, {"k", Uint8(2)}}}, nil, `duplicate key "k"`},
		{"empty key", Header{KV: []KV{{"", Uint8(1)}}}, nil, "empty key"},
		{"bad alignment", Header{KV: []KV{{AlignmentKey, Uint32(3)}}}, nil, "not a power of two"},
		{"duplicate tensor", Header{Tensors: append(one, one...)}, writeN(16), `duplicate tensor name "w"`},
		{"block multiple", Header{Tensors: []TensorInfo{{Name: "q", Type: TypeQ8_0, Shape: []int64{48}}}}, nil, "not a multiple of the block size"},
		{"long name", Header{Tensors: []TensorInfo{{Name: strings.Repeat("x", 64), Type: TypeF32, Shape: []int64{1}}}}, nil, "is too long (64 bytes, the limit is 63)"},
		{"removed type", Header{Tensors: []TensorInfo{{Name: "r", Type: 4, Shape: []int64{32}}}}, nil, "invalid ggml type"},
		{"version", Header{Version: 1}, nil, "version 1"},
		{"zero value", Header{KV: []KV{{"z", Value{typ: 99}}}}, nil, "invalid value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Write(ctx, io.Discard, tc.h, tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if !errors.Is(err, ErrWrite) {
				t.Errorf("err %v does not wrap ErrWrite", err)
			}
		})
	}
}

func TestValueAccessors(t *testing.T) {
	if x, err := Int8(-5).Int(); err != nil || x != -5 {
		t.Errorf("Int8 = %d %v", x, err)
	}
	if _, err := Int8(-5).Uint(); err == nil {
		t.Error("negative Uint: no error")
	}
	if _, err := Uint64(math.MaxUint64).Int(); err == nil {
		t.Error("Uint64 max as Int: no error")
	}
	if x, err := Float32(0.5).Float(); err != nil || x != 0.5 {
		t.Errorf("Float32 = %g %v", x, err)
	}
	if b, err := Bool(true).Bool(); err != nil || !b {
		t.Errorf("Bool = %v %v", b, err)
	}
	if _, err := String("x").Uint(); !errors.Is(err, ErrValueType) {
		t.Errorf("String.Uint: %v", err)
	}
	v := Uint16s([]uint16{1, 2, 65535})
	if a, err := v.IntArray(); err != nil || len(a) != 3 || a[2] != 65535 {
		t.Errorf("IntArray = %v %v", a, err)
	}
	if _, err := v.StringArray(); !errors.Is(err, ErrValueType) {
		t.Errorf("StringArray of u16: %v", err)
	}
	if s := Strings([]string{"a", "b", "c", "d"}).String(); s != `[string; 4] ["a", "b", "c", ...]` {
		t.Errorf("String() = %s", s)
	}
	if s := Bools([]bool{true, false}).String(); s != "[bool; 2] [true, false]" {
		t.Errorf("String() = %s", s)
	}
}

// TestReadRowsOn: the rows ReadRowsOn reads on several goroutines, whole tensors and ranges cutting
// its 1 MiB pieces anywhere, are ReadRows's bit for bit; a range past the end, a destination not a
// whole number of rows and a cancelled context fail.
func TestReadRowsOn(t *testing.T) {
	ctx := context.Background()
	const k = 1024
	h := Header{KV: []KV{{"general.architecture", String("llama")}},
		Tensors: []TensorInfo{
			{Name: "w.q8", Type: TypeQ8_0, Shape: []int64{k, 2500}}, // 1088-byte rows: 963 a piece
			{Name: "w.f32", Type: TypeF32, Shape: []int64{k, 1000}}, // 4 KiB rows: 256 a piece
		}}
	var buf bytes.Buffer
	if _, err := Write(ctx, &buf, h, func(_ context.Context, i int, ti TensorInfo, w io.Writer) error {
		row, out := make([]float32, k), make([]byte, ti.RowBytes())
		for r := range ti.Rows() {
			for j := range row {
				row[j] = float32(math.Sin(float64(int(r)*k+j+i))) * 2
			}
			if err := Quantize(ti.Type, row, out); err != nil {
				return err
			}
			if _, err := w.Write(out); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(ctx, bytes.NewReader(buf.Bytes()), int64(buf.Len()), "generated")
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range f.Tensors {
		rows := ti.Rows()
		for _, r := range [][2]int64{{0, rows}, {7, rows - 7}, {1, 962}, {962, 2}, {rows - 1, 1}, {300, 700}} {
			want := make([]float32, r[1]*k)
			if err := f.ReadRows(ctx, ti, r[0], want); err != nil {
				t.Fatal(err)
			}
			for _, workers := range []int{1, 2, 3, 5} {
				got := make([]float32, len(want))
				if err := f.ReadRowsOn(ctx, ti, r[0], got, workers); err != nil {
					t.Fatalf("%s rows [%d, +%d) on %d: %v", ti.Name, r[0], r[1], workers, err)
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s rows [%d, +%d) on %d: value %d = %v, ReadRows %v", ti.Name, r[0], r[1], workers, i, got[i], want[i])
					}
				}
			}
		}
		if err := f.ReadRowsOn(ctx, ti, 5, make([]float32, rows*k), 3); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("%s: rows past the end: %v", ti.Name, err)
		}
		if err := f.ReadRowsOn(ctx, ti, 0, make([]float32, 3*k+1), 3); err == nil || !strings.Contains(err.Error(), "whole number") {
			t.Errorf("%s: a partial row: %v", ti.Name, err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := f.ReadRowsOn(cctx, ti, 0, make([]float32, rows*k), 3); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: cancelled: %v", ti.Name, err)
		}
	}
}
