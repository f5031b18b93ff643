package quant

import "testing"

func TestAdviseCore(t *testing.T) {
	for _, c := range []struct {
		chosen          string
		avx512, avx2fma bool
		want            string
	}{
		{"Prescott", true, true, "SkylakeX"},
		{"Prescott", false, true, "Haswell"},
		{"Prescott", false, false, ""},
		{"SkylakeX", true, true, ""}, // detection worked
		{"Zen", true, true, ""},      // never second-guess a real detection
		{"", true, true, ""},         // pure-Go build
	} {
		got, ok := adviseCore(c.chosen, c.avx512, c.avx2fma)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("adviseCore(%q, %v, %v) = %q, %v; want %q", c.chosen, c.avx512, c.avx2fma, got, ok, c.want)
		}
	}
}

func TestOpenBLASCoreAdviceRespectsUser(t *testing.T) {
	t.Setenv(OpenBLASCoreEnv, "Prescott")
	if core, ok := OpenBLASCoreAdvice(); ok {
		t.Fatalf("advice %q although %s is set", core, OpenBLASCoreEnv)
	}
}
