package pack_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
	"orkpipe/ork/tile"
)

// TestRoundTripEveryDType: quantized weight -> tile -> pack -> read -> untile gives identical codes and scales,
// for every dtype, padded and segmented shapes, per-channel and grouped scales, both nibble orders.
func TestRoundTripEveryDType(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 11))
	shapes := []struct{ k, n int }{{64, 64}, {172, 100}, {5120, 96}, {17408, 70}, {64, 6144}, {172, 6144}, {8192, 33}}
	var ws []pack.Weight
	for _, dt := range pack.DTypes {
		for _, s := range shapes {
			for _, g := range []int{0, 32, 128} {
				if dt == pack.F16 && g != 0 {
					continue
				}
				nib := tile.NibbleOrder(r.IntN(2))
				name := fmt.Sprintf("blk.%d.%s.K%d.N%d.g%d.weight", len(ws), dt, s.k, s.n, g)
				ws = append(ws, quantized(r, name, dt, s.k, s.n, g, nib))
			}
		}
	}
	path := writePack(t, t.TempDir(), ws)
	ctx := context.Background()
	pr, err := pack.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if got := len(pr.Entries()); got != len(ws) {
		t.Fatalf("%d entries, want %d", got, len(ws))
	}
	for i, want := range ws {
		e := pr.Entries()[i]
		if e.Name != want.Name {
			t.Fatalf("entry %d is %q, want %q (index order = add order)", i, e.Name, want.Name)
		}
		if want.K == 17408 && e.DType != pack.I4 && e.Segments != 3 {
			t.Errorf("%s: %d segments, want 3", e.Name, e.Segments)
		}
		got, err := pr.Load(ctx, want.Name)
		if err != nil {
			t.Fatal(err)
		}
		sameWeight(t, want, got)
	}
	if err := pr.VerifyAll(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRoundTripProperty writes packs of random shapes, dtypes, groups, nibble orders and segment sizes.
func TestRoundTripProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 13))
	dir := t.TempDir()
	ctx := context.Background()
	for iter := 0; iter < 20; iter++ {
		var ws []pack.Weight
		for i := 0; i < 1+r.IntN(6); i++ {
			dt := pack.DTypes[r.IntN(len(pack.DTypes))]
			g := []int{0, 32, 64, 128}[r.IntN(4)]
			if dt == pack.F16 {
				g = 0
			}
			ws = append(ws, quantized(r, fmt.Sprintf("w%d", i), dt, 1+r.IntN(700), 1+r.IntN(300), g, tile.NibbleOrder(r.IntN(2))))
		}
		path := writePack(t, dir, ws, pack.WithSegmentK(32*(1+r.IntN(12))))
		pr, err := pack.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range ws {
			got, err := pr.Load(ctx, want.Name)
			if err != nil {
				t.Fatal(err)
			}
			sameWeight(t, want, got)
		}
		pr.Close()
	}
}

func TestDeterministic(t *testing.T) {
	mk := func() []pack.Weight {
		r := rand.New(rand.NewPCG(1, 1))
		return []pack.Weight{quantized(r, "a", pack.I4Native, 172, 100, 32, tile.LowFirst), quantized(r, "b", pack.I8Rot, 64, 64, 0, tile.LowFirst)}
	}
	dir := t.TempDir()
	a, err := os.ReadFile(writePack(t, dir, mk()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(writePack(t, dir, mk()))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatal("the same weights gave different pack bytes")
	}
}

// TestDTypeBits: the stored value width of every dtype, and 0 for an unknown one.
func TestDTypeBits(t *testing.T) {
	want := map[pack.DType]int{pack.I4Native: 4, pack.I4: 4, pack.I4RotA8: 4, pack.I8: 8, pack.I8Rot: 8, pack.F16: 16, 0: 0, 7: 0}
	for d, bits := range want {
		if got := d.Bits(); got != bits {
			t.Errorf("%s.Bits() = %d, want %d", d, got, bits)
		}
	}
}

// TestOwnedTensors: the tensors a pack owns are its entry names with every expert entry folded into its
// tensor, sorted, each once; a name whose '#' is not a canonical expert index stays whole.
func TestOwnedTensors(t *testing.T) {
	tests := []struct {
		entries []string
		want    []string
	}{
		{nil, nil},
		{[]string{"blk.1.ffn_up.weight", "blk.0.attn_q.weight"}, []string{"blk.0.attn_q.weight", "blk.1.ffn_up.weight"}},
		{[]string{"blk.0.ffn_down_exps.weight#1", "blk.0.ffn_down_exps.weight#0", "output.weight"}, []string{"blk.0.ffn_down_exps.weight", "output.weight"}},
		{[]string{"a#01", "a#1", "b#"}, []string{"a", "a#01", "b#"}},
	}
	for _, tc := range tests {
		var es []pack.Entry
		for _, n := range tc.entries {
			es = append(es, pack.Entry{Meta: pack.Meta{Name: n}})
		}
		if got := pack.OwnedTensors(es); !slices.Equal(got, tc.want) {
			t.Errorf("OwnedTensors(%q) = %q, want %q", tc.entries, got, tc.want)
		}
	}
}

// TestMoEExperts: a MUL_MAT_ID weight of 8 experts becomes 8 entries "<name>#0..7", each loadable alone.
func TestMoEExperts(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 21))
	const name = "blk.0.ffn_down_exps.weight"
	var ws []pack.Weight
	for e := 0; e < 8; e++ {
		ws = append(ws, quantized(r, pack.ExpertName(name, e), pack.I8, 128, 96, 0, tile.LowFirst))
	}
	path := writePack(t, t.TempDir(), ws)
	ctx := context.Background()
	for e := 7; e >= 0; e-- { // each from a fresh reader, in reverse order: no entry depends on another
		pr, err := pack.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pr.Load(ctx, fmt.Sprintf("%s#%d", name, e))
		if err != nil {
			t.Fatal(err)
		}
		sameWeight(t, ws[e], got)
		base, idx, ok := pack.SplitExpert(got.Name)
		if !ok || base != name || idx != e {
			t.Fatalf("SplitExpert(%q) = %q, %d, %v", got.Name, base, idx, ok)
		}
		pr.Close()
	}
}

func TestWriterRefusals(t *testing.T) {
	r := rand.New(rand.NewPCG(30, 31))
	dir := t.TempDir()
	ctx := context.Background()
	path := writePack(t, dir, []pack.Weight{quantized(r, "a", pack.I8, 64, 32, 0, tile.LowFirst)})
	before, _ := os.ReadFile(path)
	if _, err := pack.Create(ctx, path, board.Planner(board.RK3588())); err == nil {
		t.Fatal("Create over an existing pack succeeded")
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("existing pack changed")
	}
	if _, err := pack.Create(ctx, filepath.Join(dir, "x"), nil); !errors.Is(err, pack.ErrInput) {
		t.Fatalf("nil planner: %v", err)
	}

	w, err := pack.Create(ctx, filepath.Join(dir, "bad.orkpack"), board.Planner(board.RK3588()))
	if err != nil {
		t.Fatal(err)
	}
	good := quantized(r, "g", pack.I4Native, 64, 64, 32, tile.LowFirst)
	cases := map[string]func(*pack.Weight){
		"zero source":        func(w *pack.Weight) { w.Source = pack.Digest{} },
		"NaN scale":          func(w *pack.Weight) { w.Scales = append([]float32(nil), w.Scales...); w.Scales[3] = float32(nan()) },
		"short scales":       func(w *pack.Weight) { w.Scales = w.Scales[:1] },
		"int4 out of range":  func(w *pack.Weight) { w.Codes = append([]int8(nil), w.Codes...); w.Codes[5] = 9 },
		"group 48":           func(w *pack.Weight) { w.Group = 48 },
		"bad expert suffix":  func(w *pack.Weight) { w.Name = "x#07" },
		"rotation missing":   func(w *pack.Weight) { w.DType = pack.I4RotA8; w.Rotation = pack.Rotation{} },
		"act bits 4 on I8":   func(w *pack.Weight) { w.DType = pack.I8; w.ActBits = 4 },
		"high nibbles on I8": func(w *pack.Weight) { w.DType = pack.I8; w.Nibbles = tile.HighFirst },
	}
	for name, mutate := range cases {
		bad := good
		mutate(&bad)
		if err := w.Add(ctx, bad); !errors.Is(err, pack.ErrInput) {
			t.Errorf("%s: err = %v, want ErrInput", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// What the quantizer cannot make nor the emulation compute (docs/orkpack.md 3): named in the error.
	for name, c := range map[string]struct {
		mutate func(*pack.Weight)
		want   string
	}{
		"group 96":         {func(w *pack.Weight) { w.Group, w.Scales = 96, w.Scales[:w.N] }, "group 96: want 0 (per channel), 32, 64, 128, 256 or 512"},
		"group 2^24":       {func(w *pack.Weight) { w.Group, w.Scales = 1<<24, w.Scales[:w.N] }, "group 16777216: want"},
		"block 16":         {func(w *pack.Weight) { w.Rotation = pack.Rotation{Kind: pack.RotHadamard, Block: 16, Seed: 1} }, "hadamard block 16: want a power of two from 32 to 16777216"},
		"block 128, K 64":  {func(w *pack.Weight) { w.Rotation = pack.Rotation{Kind: pack.RotHadamard, Block: 128, Seed: 1} }, "hadamard block 128 does not divide K = 64"},
		"block 2^24, K 64": {func(w *pack.Weight) { w.Rotation = pack.Rotation{Kind: pack.RotHadamardUnsigned, Block: 1 << 24} }, "hadamard block 16777216 does not divide K = 64"},
	} {
		bad := good
		c.mutate(&bad)
		if err := w.Add(ctx, bad); !errors.Is(err, pack.ErrInput) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"g"`) {
			t.Errorf("%s: err = %v, want ErrInput naming the entry and %q", name, err, c.want)
		}
	}
	if err := w.Add(ctx, good); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(ctx, good); !errors.Is(err, pack.ErrInput) {
		t.Errorf("duplicate name: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*tmp"))
	if _, err := os.Stat(filepath.Join(dir, "bad.orkpack")); !os.IsNotExist(err) || len(left) != 0 {
		t.Fatalf("abandoned pack left files: %v %v", err, left)
	}
}

// TestPlanTooBig: a board that cannot hold the plan makes Commit fail and publishes nothing.
func TestPlanTooBig(t *testing.T) {
	r := rand.New(rand.NewPCG(40, 41))
	p := board.RK3588()
	p.Name = "tiny"
	p.MaxDomains = 2
	p.DomainCeiling = 64 << 10
	p.Headroom = 0
	dir := t.TempDir()
	path := filepath.Join(dir, "big.orkpack")
	w, err := pack.Create(context.Background(), path, board.Planner(p))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	for i := 0; i < 5; i++ { // 32 KiB resident each: 5 need 3 domains of 64 KiB
		if err := w.Add(ctx, quantized(r, fmt.Sprint("w", i), pack.I8, 256, 128, 0, tile.LowFirst)); err != nil {
			t.Fatal(err)
		}
	}
	err = w.Commit(ctx)
	if !errors.Is(err, board.ErrDoesNotFit) {
		t.Fatalf("Commit: %v, want ErrDoesNotFit", err)
	}
	t.Log(err)
	if _, serr := os.Stat(path); !os.IsNotExist(serr) {
		t.Fatal("a pack that does not fit was published")
	}
}

func TestAddTiled(t *testing.T) {
	r := rand.New(rand.NewPCG(50, 51))
	wt := quantized(r, "t", pack.I4RotA8, 172, 100, 32, tile.HighFirst)
	e, tiled, err := pack.TileWeight(wt, 0)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := e.Layout()
	dir := t.TempDir()
	ctx := context.Background()
	w, err := pack.Create(ctx, filepath.Join(dir, "t.orkpack"), board.Planner(board.RK3588()))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	bad := append([]byte(nil), tiled...)
	off, sh := l.Locate(wt.N, 5) // row n = N (100 of Np = 128) is padding
	bad[off] |= 1 << sh
	if err := w.AddTiled(ctx, wt.Meta, bytesReader(bad), wt.Scales); !errors.Is(err, pack.ErrInput) {
		t.Fatalf("tiled bytes with non-zero padding: %v", err)
	}
	if err := w.AddTiled(ctx, wt.Meta, bytesReader(tiled[:len(tiled)-1]), wt.Scales); !errors.Is(err, pack.ErrInput) {
		t.Fatalf("short tiled bytes: %v", err)
	}
	if err := w.AddTiled(ctx, wt.Meta, bytesReader(append(tiled, 0)), wt.Scales); !errors.Is(err, pack.ErrInput) {
		t.Fatalf("long tiled bytes: %v", err)
	}
	if err := w.AddTiled(ctx, wt.Meta, bytesReader(tiled), wt.Scales); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	pr, err := pack.Open(ctx, filepath.Join(dir, "t.orkpack"))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	got, err := pr.Load(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	sameWeight(t, wt, got)
}

// TestPreparePipelined: entries prepared in one goroutine (reusing two codes buffers) while the one
// before is added in another make the same pack, byte for byte, as AddTiled one after the other; a
// prepared entry whose name is already in the pack is refused, and a scale that is not finite is
// refused by Prepare.
func TestPreparePipelined(t *testing.T) {
	r := rand.New(rand.NewPCG(52, 53))
	type tiled struct {
		wt    pack.Weight
		codes []byte
	}
	var ws []tiled
	for i, dt := range []pack.DType{pack.I4RotA8, pack.I8Rot, pack.I4RotA8, pack.I4Native, pack.I4RotA8} {
		wt := quantized(r, fmt.Sprint("w", i), dt, 96+32*i, 40+i, 32, tile.LowFirst)
		_, codes, err := pack.TileWeight(wt, 0)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, tiled{wt, codes})
	}
	ctx := context.Background()
	dir := t.TempDir()
	write := func(name string, add func(w *pack.Writer)) []byte {
		path := filepath.Join(dir, name)
		w, err := pack.Create(ctx, path, board.Planner(board.RK3588()))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		add(w)
		if err := w.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	want := write("serial.orkpack", func(w *pack.Writer) {
		for _, x := range ws {
			if err := w.AddTiled(ctx, x.wt.Meta, bytesReader(x.codes), x.wt.Scales); err != nil {
				t.Fatal(err)
			}
		}
	})
	got := write("pipelined.orkpack", func(w *pack.Writer) {
		prepared := make(chan *pack.Prepared)
		free := make(chan []byte, 2)
		free <- nil
		free <- nil
		errs := make(chan error, 1)
		go func() {
			defer close(prepared)
			for _, x := range ws {
				p, err := w.Prepare(x.wt.Meta, bytesReader(x.codes), x.wt.Scales, <-free)
				if err != nil {
					errs <- err
					return
				}
				prepared <- p
			}
		}()
		for p := range prepared {
			if err := w.AddPrepared(ctx, p); err != nil {
				t.Fatal(err)
			}
			free <- p.Buffer()
		}
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		dup, err := w.Prepare(ws[0].wt.Meta, bytesReader(ws[0].codes), ws[0].wt.Scales, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddPrepared(ctx, dup); !errors.Is(err, pack.ErrInput) {
			t.Fatalf("adding %q twice: %v, want ErrInput", dup.Name(), err)
		}
		bad := slices.Clone(ws[1].wt.Scales)
		bad[3] = float32(nan())
		if _, err := w.Prepare(ws[1].wt.Meta, bytesReader(ws[1].codes), bad, nil); !errors.Is(err, pack.ErrInput) {
			t.Fatalf("a NaN scale: %v, want ErrInput", err)
		}
	})
	if !slices.Equal(got, want) {
		t.Fatalf("the pipelined pack (%d bytes) differs from AddTiled's (%d bytes)", len(got), len(want))
	}
	inPlace := write("bytes.orkpack", func(w *pack.Writer) {
		for _, x := range ws {
			p, err := w.PrepareBytes(x.wt.Meta, x.codes, scaleLE(x.wt.Scales))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.AddPrepared(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		x := ws[1]
		for name, bad := range map[string]func() error{
			"a NaN scale": func() error {
				sc := slices.Clone(x.wt.Scales)
				sc[3] = float32(nan())
				_, err := w.PrepareBytes(x.wt.Meta, x.codes, scaleLE(sc))
				return err
			},
			"an infinite scale": func() error {
				sc := slices.Clone(x.wt.Scales)
				sc[len(sc)-1] = float32(math.Inf(-1))
				_, err := w.PrepareBytes(x.wt.Meta, x.codes, scaleLE(sc))
				return err
			},
			"a scale short": func() error {
				_, err := w.PrepareBytes(x.wt.Meta, x.codes, scaleLE(x.wt.Scales)[4:])
				return err
			},
			"a code short": func() error {
				_, err := w.PrepareBytes(x.wt.Meta, x.codes[1:], scaleLE(x.wt.Scales))
				return err
			},
		} {
			if err := bad(); !errors.Is(err, pack.ErrInput) {
				t.Errorf("PrepareBytes with %s: %v, want ErrInput", name, err)
			}
		}
	})
	if !slices.Equal(inPlace, want) {
		t.Fatalf("the PrepareBytes pack (%d bytes) differs from AddTiled's (%d bytes)", len(inPlace), len(want))
	}
}

// scaleLE encodes scales as little-endian float32, as a tiled entry stores them.
func scaleLE(scales []float32) []byte {
	b := make([]byte, 4*len(scales))
	for i, s := range scales {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(s))
	}
	return b
}
