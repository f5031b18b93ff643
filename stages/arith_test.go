package stages

import (
	"math"
	"runtime"
	"testing"
)

// mulAdd is x*y + z as the compiler compiles it for this build: fused into one rounding where it
// uses FMA, else a rounded product and a rounded sum.
//
//go:noinline
func mulAdd(x, y, z float64) float64 { return x*y + z }

// TestNumericsNameTheCompilersFusion checks that the numerics name the compiled arithmetic of this
// build: (1+2⁻³⁰)² - (1+2⁻²⁹) is 2⁻⁶⁰ with one rounding and 0 with two. An amd64 build that does not
// fuse keeps "" (the keys every pure-Go cache holds); one that fuses (GOAMD64=v3) or any other
// architecture names itself. Run it under GOAMD64=v3 too: `GOAMD64=v3 go test ./stages -run Fusion`.
func TestNumericsNameTheCompilersFusion(t *testing.T) {
	x := 1 + math.Exp2(-30)
	fused := mulAdd(x, x, -(1+math.Exp2(-29))) != 0
	n, err := Numerics()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GOARCH %s, x*y+z fused: %v, numerics %q", runtime.GOARCH, fused, n)
	switch {
	case runtime.GOARCH == "amd64" && !fused && goArith != "":
		t.Errorf("amd64 without fused multiply-add: goArith %q, want \"\"", goArith)
	case fused && goArith == "":
		t.Errorf("this build fuses x*y+z and its numerics %q do not say so", n)
	}
}
