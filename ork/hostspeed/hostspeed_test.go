package hostspeed

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestMeasure: every speed is in range, GOMAXPROCS is restored, and a canceled context stops the
// probe with its error. (The speeds' values are the host's: no figure is asserted.)
func TestMeasure(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	s, err := Measure(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS %d after Measure, was %d", got, procs)
	}
	t.Logf("speeds: %+v", s)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Measure(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Measure with a canceled context: %v, want context.Canceled", err)
	}
}

// TestProbesRunTheirWork: each probe computes what its entry point computes (a probe that silently
// did nothing would time nothing): the forward's and the integer matmul's outputs, the Hessian's
// triangle and the Dgemm's C all change in a round.
func TestProbesRunTheirWork(t *testing.T) {
	p, err := newProblems()
	if err != nil {
		t.Fatal(err)
	}
	c, d := p.c[probeK-1], slices.Clone(p.d.Data)
	head, tail := p.y[:probeT*probeN], p.y[probeT*probeN:]
	if _, err := p.time(context.Background()); err != nil {
		t.Fatal(err)
	}
	nonzero := func(v []float32) bool { return slices.ContainsFunc(v, func(x float32) bool { return x != 0 }) }
	if !nonzero(head) || !nonzero(tail) {
		t.Errorf("outputs left zero: forward's or integer matmul's %v, integer matmul's %v", nonzero(head), nonzero(tail))
	}
	if p.c[probeK-1] == c {
		t.Errorf("the Hessian probe left its triangle's first row at %v", c)
	}
	if slices.Equal(p.d.Data, d) {
		t.Error("the Dgemm probe left C as it was")
	}
	if p.packed.N != wideN || p.packed.K != probeK || p.packed.Bits != 4 || p.acts.Bits != 8 {
		t.Errorf("the integer matmul's operands: weight %dx%d %d-bit, activations %d-bit; want %dx%d 4-bit, 8-bit",
			p.packed.N, p.packed.K, p.packed.Bits, p.acts.Bits, wideN, probeK)
	}
}

// TestSpeedsValidate: a speed outside [MinSpeed, MaxSpeed], zero or NaN is named.
func TestSpeedsValidate(t *testing.T) {
	if err := Reference.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set  func(*Speeds)
		want string
	}{
		{func(s *Speeds) { s.Forward = 0 }, "forward 0"},
		{func(s *Speeds) { s.Hessian = MaxSpeed * 2 }, "hessian 200"},
		{func(s *Speeds) { s.Dgemm = -1 }, "dgemm -1"},
		{func(s *Speeds) { s.IntMatMul = nan() }, "intmatmul NaN"},
		{func(s *Speeds) { s.Scalar = MinSpeed / 2 }, "scalar 0.005"},
	} {
		s := Reference
		tc.set(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", s, err, tc.want)
		}
	}
}

func nan() float64 { z := 0.0; return z / z }

// TestHost: the description names the CPU's kernels' instruction sets and the environment that
// changes them.
func TestHost(t *testing.T) {
	t.Setenv("OPENBLAS_NUM_THREADS", "3")
	h := Host()
	if !strings.Contains(h, runtime.GOOS+"/"+runtime.GOARCH) || !strings.Contains(h, "OPENBLAS_NUM_THREADS=3") {
		t.Errorf("Host() = %q", h)
	}
	if runtime.GOARCH == "amd64" && !strings.Contains(h, "avx512f=") {
		t.Errorf("Host() = %q: want the AVX-512 flags", h)
	}
}
