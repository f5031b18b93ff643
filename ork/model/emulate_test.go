package model

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/zeebo/blake3"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/board"
	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
	"orkpipe/ork/quant"
)

// scheme is how one weight is quantized into the test pack.
type scheme struct {
	dtype   pack.DType
	group   int
	rotate  bool
	actBits int
	clip    float32 // activation clip; 0 = the default (1)
}

// packWeight quantizes a float weight of src by RTN and converts it to a pack entry.
func packWeight(t testing.TB, src *GGUFSource, name string, s scheme) pack.Weight {
	t.Helper()
	ctx := context.Background()
	k, n, ok := src.Shape(name)
	if !ok {
		t.Fatalf("no matrix %s", name)
	}
	lin, _, err := src.Linear(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	w := lin.(*Dense).W
	m := quant.Matrix{Name: name, Rows: n, Cols: k, Data: w}
	var pw pack.Weight
	pw.Name, pw.DType, pw.N, pw.ActBits, pw.ActClip = name, s.dtype, n, s.actBits, s.clip
	raw := make([]byte, 4*len(w))
	for i, v := range w {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	pw.Source = blake3.Sum256(raw)
	if s.dtype == pack.F16 {
		pw.K = k
		pw.F16 = make([]uint16, len(w))
		for i, v := range w {
			pw.F16[i] = quant.FP32ToFP16(v)
		}
		return pw
	}
	bits := 8
	if s.dtype.Int4() {
		bits = 4
	}
	opts := []quant.Option{quant.WithBits(bits), quant.WithGroup(s.group)}
	if s.rotate {
		opts = append(opts, quant.WithRotation(true, 0x5eed))
	}
	qw, err := quant.RTN(ctx, m, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	pw.K, pw.Group, pw.Codes, pw.Scales, pw.QErr = qw.KP, qw.Group, qw.Codes, qw.Scales, qw.QErr
	if s.rotate {
		pw.Rotation = pack.Rotation{Kind: pack.RotHadamard, Block: qw.Rotation.Block, Seed: qw.Rotation.Seed}
	}
	return pw
}

// testPackSource writes a pack of src's weights by schemes (writeTestPack), opens it (closed when the
// test ends) and returns the PackSource over src and the pack.
func testPackSource(t testing.TB, src *GGUFSource, schemes map[string]scheme) (*PackSource, *pack.Reader) {
	t.Helper()
	p, err := pack.Open(context.Background(), writeTestPack(t, src, schemes))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ps, err := NewPackSource(src, p)
	if err != nil {
		t.Fatal(err)
	}
	return ps, p
}

// writeTestPack quantizes the named weights of stories260K and writes them as an orkpack.
func writeTestPack(t testing.TB, src *GGUFSource, schemes map[string]scheme) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "test.orkpack")
	w, err := pack.Create(ctx, path, board.Planner(board.RK3588()))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, name := range sortedKeys(schemes) {
		if err := w.Add(ctx, packWeight(t, src, name, schemes[name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return path
}

func sortedKeys(m map[string]scheme) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

func storiesSource(t testing.TB) *GGUFSource {
	t.Helper()
	f, err := gguf.Open(context.Background(), testfiles.Path(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return NewGGUFSource(f, 64<<20)
}

// referenceInt is a direct integer reference of the board's matmul as docs/orkpack.md 2.4 states it,
// independent of quant.MatMulInt: per token amax → scale act_clip·amax/qmax → rounded, clamped codes; per
// group an int32 sum of code products; float32 accumulation over groups in order; times the token's scale.
func referenceInt(w pack.Weight, rot quant.Rotation, x []float32, k, actBits int) []float32 {
	clip := float64(w.ActClip) // the pack reader's Meta: 1 when unset
	t := len(x) / k
	kp := w.K
	xr := x
	if !rot.IsZero() {
		xr = make([]float32, t*kp)
		if err := rot.Apply(xr, x, t); err != nil {
			panic(err)
		}
	}
	qmax, lo, hi := 127.0, -127, 127
	if actBits == 4 {
		qmax, lo, hi = 7, -8, 7
	}
	g := w.Group
	if g == 0 {
		g = kp
	}
	ng := (kp + g - 1) / g
	y := make([]float32, t*w.N)
	codes := make([]int, kp)
	for tt := 0; tt < t; tt++ {
		row := xr[tt*kp : (tt+1)*kp]
		amax := 0.0
		for _, v := range row {
			amax = math.Max(amax, math.Abs(float64(v)))
		}
		s := float32(clip * amax / qmax)
		for j, v := range row {
			c := 0
			if s != 0 {
				c = int(math.Round(float64(v) * (1 / float64(s))))
			}
			codes[j] = max(lo, min(hi, c))
		}
		for n := 0; n < w.N; n++ {
			var acc float32
			for gi := 0; gi < ng; gi++ {
				var sum int32
				for j := gi * g; j < min((gi+1)*g, kp); j++ {
					sum += int32(codes[j]) * int32(w.Codes[n*kp+j])
				}
				acc += float32(sum) * w.Scales[n*ng+gi]
			}
			y[tt*w.N+n] = acc * s
		}
	}
	return y
}

// TestEmulatedMatchesIntegerReference: for pack entries of every integer dtype (rotated or not, int4 or
// int8 activations, per channel or per group, with and without an activation clip), the emulated matmul
// equals the direct integer reference bit for bit on random inputs.
func TestEmulatedMatchesIntegerReference(t *testing.T) {
	src := storiesSource(t)
	schemes := map[string]scheme{
		"blk.0.attn_q.weight":      {dtype: pack.I8, group: 0, actBits: 8},
		"blk.0.attn_k.weight":      {dtype: pack.I8Rot, group: 32, rotate: true},
		"blk.0.ffn_gate.weight":    {dtype: pack.I4Native, group: 32, actBits: 4, clip: 0.8},
		"blk.0.ffn_up.weight":      {dtype: pack.I4, group: 0, clip: 0.9},
		"blk.0.ffn_down.weight":    {dtype: pack.I4RotA8, group: 32, rotate: true, clip: 0.65}, // K = 172, padded to 192
		"blk.0.attn_output.weight": {dtype: pack.I4Native, group: 32, rotate: true, actBits: 4, clip: 0.775},
		"blk.0.attn_v.weight":      {dtype: pack.F16},
	}
	ps, p := testPackSource(t, src, schemes)
	r := rand.New(rand.NewPCG(1, 2))
	for _, name := range sortedKeys(schemes) {
		s := schemes[name]
		if s.dtype == pack.F16 {
			continue
		}
		lin, ok, err := ps.Linear(context.Background(), name)
		if err != nil || !ok {
			t.Fatalf("%s: %v", name, err)
		}
		em := lin.(*Emulated)
		w, err := p.Load(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		wantClip := s.clip
		if wantClip == 0 {
			wantClip = 1 // an entry written without a clip runs unclipped
		}
		if w.ActClip != wantClip || em.ActClip != float64(wantClip) {
			t.Fatalf("%s: clip %v in the pack, %v emulated; want %v", name, w.ActClip, em.ActClip, wantClip)
		}
		n, k := em.Dims()
		const tokens = 200 // rotated and multiplied on up to 3 goroutines, a share each
		x := make([]float32, tokens*k)
		for i := range x {
			x[i] = float32(r.NormFloat64())
			if r.IntN(50) == 0 {
				x[i] *= 20 // activation outliers
			}
		}
		want := referenceInt(w, em.W.Rotation, x, k, em.ActBits)
		y := make([]float32, tokens*n)
		for _, workers := range []int{1, 3, 0} { // 0 last: y is the default's below
			em.Workers = workers
			prev := runtime.GOMAXPROCS(3)
			err := em.Apply(y, x)
			runtime.GOMAXPROCS(prev)
			if err != nil {
				t.Fatal(err)
			}
			for i := range y {
				if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s (%s), %d workers: output %d = %v, integer reference %v", name, s.dtype, workers, i, y[i], want[i])
				}
			}
		}
		// And the emulation stays close to the float product (quantization error only).
		fl, _, _ := src.Linear(context.Background(), name)
		yf := make([]float32, len(y))
		fl.Apply(yf, x)
		t.Logf("%-26s %-9s K=%3d KP=%3d act %d bits clip %.4g: bit-exact; relative error vs float %.4f", name, s.dtype, k, w.K, em.ActBits, em.ActClip, relErr(y, yf))
	}
}

func relErr(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i] - b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / den)
}

// TestRotationInvariance: rotating weight rows and activations the same way leaves W·x unchanged (up to
// float rounding), for K with and without padding.
func TestRotationInvariance(t *testing.T) {
	src := storiesSource(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, name := range []string{"blk.1.attn_q.weight", "blk.1.ffn_down.weight"} {
		lin, _, err := src.Linear(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		d := lin.(*Dense)
		rot, err := quant.NewRotation(d.K, true, 77)
		if err != nil {
			t.Fatal(err)
		}
		wr := make([]float32, d.N*rot.Padded)
		if err := rot.Apply(wr, d.W, d.N); err != nil {
			t.Fatal(err)
		}
		const tokens = 5
		x := make([]float32, tokens*d.K)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		xr := make([]float32, tokens*rot.Padded)
		if err := rot.Apply(xr, x, tokens); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, tokens*d.N)
		yr := make([]float32, tokens*d.N)
		d.Apply(y, x)
		dr, _ := NewDense(d.N, rot.Padded, wr, nil)
		dr.Apply(yr, xr)
		e := relErr(yr, y)
		t.Logf("%s: K=%d padded %d, relative difference after rotation %.2g", name, d.K, rot.Padded, e)
		if e > 1e-5 {
			t.Errorf("%s: rotation changed W·x by %.3g (relative)", name, e)
		}
	}
}

// TestEvaluatePack evaluates a pack of all block weights (int8 per channel, int8 activations) against
// its float model: the emulated model's perplexity is close to the float one and its KLD small.
func TestEvaluatePack(t *testing.T) {
	src := storiesSource(t)
	schemes := map[string]scheme{}
	for l := 0; l < 5; l++ {
		for _, w := range []string{"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"} {
			schemes[fmt.Sprintf("blk.%d.%s.weight", l, w)] = scheme{dtype: pack.I8Rot, group: 32, rotate: true}
		}
	}
	ps, _ := testPackSource(t, src, schemes)
	cfg, err := ConfigFromGGUF(src.File())
	if err != nil {
		t.Fatal(err)
	}
	pm, _ := NewModel(cfg, ps)
	fm, _ := NewModel(cfg, src)
	tok, err := TokenizerFromGGUF(src.File())
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := tok.Encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "+
		"One day, she saw a big red ball. She wanted to play with it, but it was too high. Lily asked her mom for help. "+
		"Her mom said, \"Let's try together!\" They jumped and jumped, and finally they got the ball. Lily was very happy.", true, false)
	res, err := Evaluate(context.Background(), pm, ids, EvalOptions{Ctx: 32, BOS: tok.Vocab().BOS, Base: fm})
	if err != nil {
		t.Fatal(err)
	}
	base, err := Evaluate(context.Background(), fm, ids, EvalOptions{Ctx: 32, BOS: tok.Vocab().BOS})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("W8A8 rotated pack: PPL %.4f (float %.4f), KLD mean %.5f max %.5f, same top %.3f", res.PPL, base.PPL, res.KLD.Mean, res.KLD.Max, *res.SameTop)
	if math.Abs(res.PPL/base.PPL-1) > 0.05 || res.KLD.Mean > 0.02 || res.KLD.Mean <= 0 {
		t.Errorf("W8A8 pack: PPL %.4f vs float %.4f, mean KLD %.5f: not what int8 weights and activations give", res.PPL, base.PPL, res.KLD.Mean)
	}
}

// TestEmulationBytesCoversApply: the first Apply of a rotated entry on an empty pool (two
// collections empty the pools) allocates no more than EmulationBytes says, with 16 KiB for the
// matmul's small per-call values: an entry of the model's K = 64 padded to one Hadamard block of 2^16,
// as a pack may carry it, on one token. EmulationBytes counted the rotated rows and the activation
// codes only (0.33 MB), where the call allocated 2.4 MB: the rotation's padded row and sign vector as
// float64 (16·KP bytes a call, on every worker rotating), QuantizeActivations' float64 row and the
// AVX2 panel kernel's widened codes (8·KP each).
func TestEmulationBytesCoversApply(t *testing.T) {
	const k, kp, n, group = 64, 1 << 16, 4, 32
	w := pack.Weight{Meta: pack.Meta{Name: "blk.0.attn_k.weight", DType: pack.I8Rot, K: kp, N: n, Group: group, ActBits: 8,
		Rotation: pack.Rotation{Kind: pack.RotHadamard, Block: kp, Seed: 3}}, Codes: make([]int8, n*kp), Scales: make([]float32, n*kp/group)}
	for i := range w.Codes {
		w.Codes[i] = int8(i%255 - 127)
	}
	for i := range w.Scales {
		w.Scales[i] = 1
	}
	e, err := NewEmulated(context.Background(), w, k)
	if err != nil {
		t.Fatal(err)
	}
	alloc := firstApplyAlloc(t, e, 1)
	want, ok := EmulationBytes(w.Meta, 1, 0)
	t.Logf("first Apply on one token: %d bytes allocated; EmulationBytes %d", alloc, want)
	if !ok || alloc > uint64(want)+16<<10 {
		t.Errorf("first Apply of a KP = %d entry on one token allocated %d bytes, EmulationBytes says %d (%v)", kp, alloc, want, ok)
	}
}

// firstApplyAlloc is what the first Apply of e on tokens tokens (of a fixed pattern) allocates, on
// empty pools (two collections empty them).
func firstApplyAlloc(t *testing.T, e *Emulated, tokens int) uint64 {
	t.Helper()
	x, y := make([]float32, tokens*e.K), make([]float32, tokens*e.N)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := e.Apply(y, x); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
