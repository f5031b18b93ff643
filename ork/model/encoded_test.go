package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
	"orkpipe/ork/internal/parallel"
	"orkpipe/ork/internal/sgemm"
)

// encodedTokens are the token counts the equality tests run: both of gonum's Sgemm paths (serial below
// four 64×64 tiles of output, parallel from four), and a count that is not a multiple of the tile.
var encodedTokens = []int{1, 5, 64, 65, 130, 200}

// sameBits reports the first index where a and b differ in bits, or -1.
func sameBits(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// checkEncodedEqualsDense applies e and d (the same weight) to inputs of every encodedTokens count and
// fails on any output whose bits differ.
func checkEncodedEqualsDense(t *testing.T, what string, e *Encoded, d Linear, seed uint64) {
	t.Helper()
	n, k := d.Dims()
	if en, ek := e.Dims(); en != n || ek != k {
		t.Fatalf("%s: encoded %dx%d, dense %dx%d", what, en, ek, n, k)
	}
	r := rand.New(rand.NewPCG(seed, 7))
	for _, tok := range encodedTokens {
		x := make([]float32, tok*k)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		yd, ye := make([]float32, tok*n), make([]float32, tok*n)
		for i := range ye {
			ye[i] = float32(math.NaN()) // every output must be written
		}
		if err := d.Apply(yd, x); err != nil {
			t.Fatal(err)
		}
		if err := e.Apply(ye, x); err != nil {
			t.Fatal(err)
		}
		if i := sameBits(yd, ye); i >= 0 {
			t.Fatalf("%s, %d tokens (%d rows per block): output [%d][%d] = %v encoded, %v dense", what, tok, e.blockRows(tok), i/n, i%n, ye[i], yd[i])
		}
	}
}

// TestEncodedEqualsDenseRealTensors compares, bit for bit, every matmul weight of the quantized and
// half-precision test models read as Encoded and as Dense (gguf's dequantization): Q8_0, Q4_0, Q5_0
// and F16 tensors written by llama.cpp, in one block and in blocks of 64 rows.
func TestEncodedEqualsDenseRealTensors(t *testing.T) {
	ctx := context.Background()
	seen := map[gguf.Type]int{}
	for _, name := range []string{"stories260K-Q8_0.gguf", "stories260K-Q4_0.gguf", "stories260K-Q4_K_M.gguf", "llama-2-tiny-random.gguf"} {
		f, err := gguf.Open(ctx, testfiles.Path(t, name))
		if err != nil {
			t.Fatal(err)
		}
		dense, enc := NewGGUFSource(f, 0), NewGGUFSource(f, 0)
		enc.KeepEncoded = true
		for _, ti := range f.Tensors {
			if len(ti.Shape) != 2 || !KeepsEncoded(ti.Type) {
				continue
			}
			d, _, err := dense.Linear(ctx, ti.Name)
			if err != nil {
				t.Fatal(err)
			}
			l, _, err := enc.Linear(ctx, ti.Name)
			if err != nil {
				t.Fatal(err)
			}
			e, ok := l.(*Encoded)
			if !ok {
				t.Fatalf("%s: %s %s: KeepEncoded gave a %T", name, ti.Name, ti.Type, l)
			}
			if len(e.Raw) != int(ti.Size) {
				t.Fatalf("%s: %s holds %d bytes, the tensor has %d", name, ti.Name, len(e.Raw), ti.Size)
			}
			what := fmt.Sprintf("%s %s %s", name, ti.Name, ti.Type)
			checkEncodedEqualsDense(t, what, e, d, uint64(len(seen)))
			e.blockBytes = 4 * gonumBlock * e.K // 64-row blocks where the paths allow
			checkEncodedEqualsDense(t, what+" (small blocks)", e, d, 1)
			seen[ti.Type]++
		}
		f.Close()
	}
	for _, typ := range []gguf.Type{gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeF16} {
		if seen[typ] == 0 {
			t.Errorf("no %s tensor was compared (seen %v)", typ, seen)
		}
	}
}

// synthEncoded quantizes a Gaussian n×k weight with heavy-tailed columns to typ and returns it as an
// Encoded and as the Dense of its dequantized values.
func synthEncoded(t testing.TB, typ gguf.Type, n, k int, seed uint64) (*Encoded, *Dense) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.02)
		if i%k%97 == 0 {
			w[i] *= 20
		}
	}
	rb, err := typ.RowBytes(int64(k))
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, int64(n)*rb)
	if err := gguf.Quantize(typ, w, raw); err != nil {
		t.Fatal(err)
	}
	e, err := NewEncoded(typ, n, k, raw)
	if err != nil {
		t.Fatal(err)
	}
	dq := make([]float32, n*k)
	if err := gguf.Dequantize(typ, raw, dq); err != nil {
		t.Fatal(err)
	}
	d, err := NewDense(n, k, dq, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e, d
}

// TestEncodedEqualsDenseSynthetic covers shapes the test models lack: many row blocks with a short last
// block (n not a multiple of 64), wide rows, and every type Quantize writes; weights of one block with
// their rows decoded by sgemm.NTRows (on AVX2) and dequantized whole.
func TestEncodedEqualsDenseSynthetic(t *testing.T) {
	cases := []struct {
		typ        gguf.Type
		n, k       int
		blockBytes int // 0: the default
	}{
		{gguf.TypeQ8_0, 1000, 320, 4 * 64 * 320},
		{gguf.TypeQ8_0, 1000, 320, 4 * 192 * 320},
		{gguf.TypeQ8_0, 70, 2048, 0},
		{gguf.TypeQ8_0, 3000, 1024, 0},
		{gguf.TypeQ4_0, 515, 96, 4 * 64 * 96},
		{gguf.TypeF16, 333, 100, 4 * 64 * 100},
		{gguf.TypeBF16, 257, 64, 4 * 64 * 64},
	}
	for i, c := range cases {
		for _, decode := range []bool{true, false} {
			name := fmt.Sprintf("%s-%dx%d-block%d-decode%v", c.typ, c.n, c.k, c.blockBytes, decode)
			t.Run(name, func(t *testing.T) {
				defer func(prev bool) { decodeRows = prev }(decodeRows)
				decodeRows = decode
				e, d := synthEncoded(t, c.typ, c.n, c.k, uint64(i))
				e.blockBytes = c.blockBytes
				if rows := e.blockRows(200); c.blockBytes != 0 && rows >= c.n {
					t.Fatalf("%d rows per block: the case should have several blocks", rows)
				}
				checkEncodedEqualsDense(t, name, e, d, uint64(i))
			})
		}
	}
}

// TestEncodedDecode: Decode of rows and whole blocks of values (sgemm.Rows) gives the values of the
// whole rows' dequantization; ranges off the blocks or the weight are errors.
func TestEncodedDecode(t *testing.T) {
	for i, typ := range []gguf.Type{gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeF16} {
		e, d := synthEncoded(t, typ, 9, 1024, uint64(i))
		want := d.W
		for _, c := range [][4]int{{0, 9, 0, 1024}, {2, 5, 512, 1024}, {8, 9, 0, 512}, {3, 7, 256, 768}} {
			r0, r1, k0, k1 := c[0], c[1], c[2], c[3]
			got := make([]float32, (r1-r0)*(k1-k0))
			if err := e.Decode(got, r0, r1, k0, k1); err != nil {
				t.Fatalf("%s rows [%d, %d) values [%d, %d): %v", typ, r0, r1, k0, k1, err)
			}
			for r := r0; r < r1; r++ {
				if j := sameBits(want[r*1024+k0:r*1024+k1], got[(r-r0)*(k1-k0):(r-r0+1)*(k1-k0)]); j >= 0 {
					t.Fatalf("%s row %d value %d: %v, dequantized %v", typ, r, k0+j, got[(r-r0)*(k1-k0)+j], want[r*1024+k0+j])
				}
			}
		}
		for _, c := range [][4]int{{0, 10, 0, 1024}, {0, 1, 16, 1024}, {0, 1, 0, 1040}, {5, 4, 0, 1024}} {
			r0, r1, k0, k1 := c[0], c[1], c[2], c[3]
			err := e.Decode(make([]float32, max(0, (r1-r0)*(k1-k0))), r0, r1, k0, k1)
			if typ == gguf.TypeF16 && c == [4]int{0, 1, 16, 1024} {
				if err != nil { // F16's blocks are single values
					t.Errorf("F16 values [16, 1024): %v", err)
				}
				continue
			}
			if !errors.Is(err, ErrBadModel) {
				t.Errorf("%s rows [%d, %d) values [%d, %d): err %v, want ErrBadModel", typ, r0, r1, k0, k1, err)
			}
		}
	}
}

// TestEncodedScratchBound checks the documented bound: whatever the token count, the scratch of an Apply
// (one block of every row, or two blocks, or a panel per worker) is at most EncodedScratchBytes(n, k).
func TestEncodedScratchBound(t *testing.T) {
	for _, k := range []int{64, 320, 5120, 17408, 100000} {
		for _, n := range []int{1, 64, 300, 1000, 5120, 17408, 40000} {
			for _, tok := range []int{1, 64, 65, 128, 193, 512, 4096} {
				e := &Encoded{N: n, K: k}
				rows := e.blockRows(tok)
				held := 2 * int64(rows) * int64(k) * 4
				if rows == n {
					held /= 2
				}
				if held > EncodedScratchBytes(n, k) {
					t.Errorf("k %d, n %d, %d tokens: blocks of %d rows hold %d bytes > EncodedScratchBytes %d", k, n, tok, rows, held, EncodedScratchBytes(n, k))
				}
				// One block on AVX2: one NTRows (applyWorkers), its decoded panels.
				if rows == n && sgemm.DecodesRows(k) && sgemm.RowsScratchBytes(n, k) > EncodedScratchBytes(n, k) {
					t.Errorf("k %d, n %d, %d tokens: NTRows' panels hold %d bytes > EncodedScratchBytes %d", k, n, tok, sgemm.RowsScratchBytes(n, k), EncodedScratchBytes(n, k))
				}
				// Under OpenBLAS (applyPipelined): one block when it is the whole weight, else two.
				rows = pipelineRows(n, k)
				held = 2 * int64(rows) * int64(k) * 4
				if rows == n {
					held /= 2
				}
				if held > EncodedScratchBytes(n, k) {
					t.Errorf("k %d, n %d: pipelined blocks of %d rows hold %d bytes > EncodedScratchBytes %d", k, n, rows, held, EncodedScratchBytes(n, k))
				}
				// Under a single-threaded OpenBLAS (applyPanels): one panel per worker.
				rows = panelRows(n, k)
				held = int64(parallel.Workers(ceilDiv(n, rows))) * int64(rows) * int64(k) * 4
				if held > EncodedScratchBytes(n, k) {
					t.Errorf("k %d, n %d: panels of %d rows hold %d bytes > EncodedScratchBytes %d", k, n, rows, held, EncodedScratchBytes(n, k))
				}
			}
		}
	}
	// Two blocks of 256 rows (the 27B ffn_down is never one block, so never one NTRows: no panels
	// counted, whatever the number of cores).
	if got, want := EncodedScratchBytes(5120, 17408), int64(2*4*17408*256); got != want {
		t.Errorf("27B ffn_down scratch %d, want %d", got, want)
	}
}

func TestEncodedConcurrentApply(t *testing.T) {
	e, d := synthEncoded(t, gguf.TypeQ8_0, 700, 256, 3)
	e.blockBytes = 4 * 64 * 256
	x := make([]float32, 130*256)
	for i := range x {
		x[i] = float32(i%13) - 6
	}
	want := make([]float32, 130*700)
	if err := d.Apply(want, x); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			y := make([]float32, len(want))
			if err := e.Apply(y, x); err != nil {
				errs <- err
				return
			}
			if i := sameBits(want, y); i >= 0 {
				errs <- fmt.Errorf("output %d: %v, want %v", i, y[i], want[i])
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestNewEncodedErrors(t *testing.T) {
	for _, c := range []struct {
		typ  gguf.Type
		n, k int
		raw  int
		want string
	}{
		{gguf.TypeF32, 2, 32, 256, "type F32"},
		{gguf.TypeQ8_0, 2, 40, 68, "not whole blocks of 32"},
		{gguf.TypeQ8_0, 2, 32, 67, "67 bytes, want 2 rows of 34"},
		{gguf.TypeQ8_0, 0, 32, 0, "not whole blocks"},
		{gguf.TypeQ6_K, 1, 256, 209, "209 bytes, want 1 rows of 210"},
		{gguf.TypeIQ2_XS, 1, 256, 74, "type IQ2_XS"},
	} {
		_, err := NewEncoded(c.typ, c.n, c.k, make([]byte, c.raw))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewEncoded(%s, %d, %d, %d bytes) = %v, want an error containing %q", c.typ, c.n, c.k, c.raw, err, c.want)
		}
	}
	e, _ := synthEncoded(t, gguf.TypeQ8_0, 4, 32, 1)
	if err := e.Apply(make([]float32, 3), make([]float32, 32)); !errors.Is(err, ErrBadModel) {
		t.Errorf("Apply with a short y: %v, want ErrBadModel", err)
	}
}

// TestEncodedForwardBitIdentical runs a quantized test model through the whole forward pass with
// KeepEncoded and without, with float32 inputs (calibrate, screen) and with ggml's input rounding
// (GGMLActivations: orkpipe eval's default): the logits must be the same bits (so are calibration
// Hessians and eval's figures).
func TestEncodedForwardBitIdentical(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		ggmlAct bool
	}{{"stories260K-Q8_0.gguf", false}, {"stories260K-Q4_K_M.gguf", false}, {"stories260K-Q8_0.gguf", true}, {"stories260K-Q4_0.gguf", true}} {
		name := c.name
		if c.ggmlAct {
			name += " (GGMLActivations)"
		}
		m, tok, f, err := OpenGGUF(ctx, testfiles.Path(t, c.name), 0)
		if err != nil {
			t.Fatal(err)
		}
		m.Src.(*GGUFSource).GGMLActivations = c.ggmlAct
		ids, err := tok.Encode("Once upon a time there was a little boat. She sailed to the sea and saw the sun and the moon.", true, false)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(append(append(ids, ids...), ids...), ids...)
		want, err := m.Forward(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		m.Src.(*GGUFSource).KeepEncoded = true
		got, err := m.Forward(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		if i := sameBits(want, got); i >= 0 {
			t.Errorf("%s, %d tokens: logit %d is %v with KeepEncoded, %v without", name, len(ids), i, got[i], want[i])
		}
		m.Src.(*GGUFSource).MapEncoded = true
		if got, err = m.Forward(ctx, ids); err != nil {
			t.Fatal(err)
		}
		if i := sameBits(want, got); i >= 0 {
			t.Errorf("%s, %d tokens: logit %d is %v with KeepEncoded and MapEncoded, %v without", name, len(ids), i, got[i], want[i])
		}
		if m.Cfg.WeightType == gguf.TypeF32 {
			t.Errorf("%s: Config.WeightType F32, want the widest block weight type", name)
		}
		f.Close()
	}
}

// TestWeightTypeAndBytes checks ConfigFromGGUF's WeightType on the test models and WeightBytes against
// the tensors' sizes.
func TestWeightTypeAndBytes(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		file string
		want gguf.Type
	}{
		{"stories260K.gguf", gguf.TypeF32},
		{"stories260K-Q8_0.gguf", gguf.TypeF16},   // the 172-wide ffn_down fell back to F16
		{"stories260K-Q4_K_M.gguf", gguf.TypeF16}, // idem
		{"llama-2-tiny-random.gguf", gguf.TypeF16},
	} {
		f, err := gguf.Open(ctx, testfiles.Path(t, c.file))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ConfigFromGGUF(f)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.WeightType != c.want {
			t.Errorf("%s: WeightType %s, want %s", c.file, cfg.WeightType, c.want)
		}
		for _, ti := range f.Tensors {
			if strings.HasPrefix(ti.Name, "blk.") && len(ti.Shape) == 2 {
				held := ti.Size
				if !KeepsEncoded(ti.Type) {
					held = 4 * ti.Elements()
				}
				if wb := cfg.WeightBytes(int(ti.Shape[1]), int(ti.Shape[0])); wb < held {
					t.Errorf("%s: %s (%s) holds %d bytes, WeightBytes says %d", c.file, ti.Name, ti.Type, held, wb)
				}
			}
		}
		f.Close()
	}
	q8 := Config{WeightType: gguf.TypeQ8_0}
	if got := q8.WeightBytes(5120, 17408); got != 5120*17408/32*34 {
		t.Errorf("Q8_0 5120x17408: %d bytes", got)
	}
	if got := (&Config{}).WeightBytes(3, 5); got != 60 {
		t.Errorf("F32 3x5: %d bytes", got)
	}
}

// TestLayerReleaseFreesEncoded checks that Layer.Release frees every Encoded weight a layer holds,
// bare and inside the wrappers a GGUFSource puts around one, once each.
func TestLayerReleaseFreesEncoded(t *testing.T) {
	freed := map[string]int{}
	enc := func(name string) *Encoded {
		e, _ := synthEncoded(t, gguf.TypeQ8_0, 4, 32, 1)
		e.free = func() { freed[name]++ }
		return e
	}
	l := &Layer{
		Q:         linearWithBias{Linear: enc("q"), bias: make([]float32, 4)},
		K:         &ggmlActLinear{Linear: enc("k"), typ: gguf.TypeQ8_0},
		V:         enc("v"),
		O:         enc("o"),
		Gate:      enc("gate"),
		Up:        enc("up"),
		Down:      enc("down"),
		DeltaNet:  &DeltaNetWeights{QKV: enc("qkv"), Gate: enc("z"), Alpha: enc("alpha"), Beta: enc("beta"), Out: enc("out")},
		ShortConv: &ShortConvWeights{InProj: enc("in"), OutProj: enc("outproj")},
		Experts:   []Expert{{Gate: enc("e.gate"), Up: enc("e.up"), Down: enc("e.down")}},
		Shared:    &SharedExpert{Gate: enc("s.gate"), Up: enc("s.up"), Down: enc("s.down")},
		Router:    enc("router"),
	}
	want := len(freed)
	l.Release()
	for _, name := range []string{"q", "k", "v", "o", "gate", "up", "down", "qkv", "z", "alpha", "beta", "out", "in", "outproj",
		"e.gate", "e.up", "e.down", "s.gate", "s.up", "s.down", "router"} {
		if freed[name] != 1 {
			t.Errorf("weight %s freed %d times, want 1", name, freed[name])
		}
	}
	if want != 0 {
		t.Fatalf("%d weights freed before Release", want)
	}
}
