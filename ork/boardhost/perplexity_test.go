package boardhost

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

func TestParsePerplexity(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want *Scores
	}{
		{"nothing", "llama_model_loader: loaded\nmain: done\n", nil},
		{"final estimate", "[1]2.6139,[2]2.5511,[3]2.4871,\nFinal estimate: PPL = 2.4871 +/- 0.03228\n",
			&Scores{PPL: 2.4871, PPLErr: 0.03228, PPLSource: PPLFromFinalEstimate, Chunks: 3}},
		{"log prefix and CRLF", "0.00.035.060 I Final estimate: PPL = 17.2268 +/- 0.31000\r\n",
			&Scores{PPL: 17.2268, PPLErr: 0.31, PPLSource: PPLFromFinalEstimate}},
		{"colored log", "\x1b[32m0.00.035.060 I \x1b[0mFinal estimate: PPL = 2.4871 +/- 0.03228\x1b[0m\n",
			&Scores{PPL: 2.4871, PPLErr: 0.03228, PPLSource: PPLFromFinalEstimate}},
		{"no uncertainty", "Final estimate: PPL = 5.9068\n", &Scores{PPL: 5.9068, PPLSource: PPLFromFinalEstimate}},
		{"no trailing newline", "[1]3.0000,\nFinal estimate: PPL = 3.0000 +/- 0.10000",
			&Scores{PPL: 3, PPLErr: 0.1, PPLSource: PPLFromFinalEstimate, Chunks: 1}},
		{"chunks split over lines", "[1]3.1,[2]3.0,\n[3]2.9,\nFinal estimate: PPL = 2.9 +/- 0.1\n",
			&Scores{PPL: 2.9, PPLErr: 0.1, PPLSource: PPLFromFinalEstimate, Chunks: 3}},
		{"kld mode", "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p\n" +
			"   1       2.7012 ±    0.1223       0.01883 ±    0.00921       0.06012 ±    0.00312     5.567 ±  0.312 %    91.765 ±  1.725 %\n" +
			"   2       2.7000 ±    0.1000       0.01883 ±    0.00921       0.06012 ±    0.00312     5.567 ±  0.312 %    91.765 ±  1.725 %\n" +
			"Mean PPL(Q)                   :   2.679800 ±   0.035171\n" +
			"Mean    KLD:   0.065580 ±   0.000832\n" +
			"99.0%   KLD:   0.457112\n" +
			" 1.0%   KLD:   0.000052\n" +
			"Median  KLD:   0.037221\n" +
			"RMS Δp    :  5.321 ± 0.112 %\n" +
			"Same top p: 91.234 ± 0.225 %\n",
			&Scores{PPL: 2.6798, PPLErr: 0.035171, PPLSource: PPLFromMeanPPLQ, Chunks: 2, KLD: map[string]float64{
				"ppl_q": 2.6798, "ppl_q_err": 0.035171, "mean": 0.06558, "mean_err": 0.000832, "p99": 0.457112,
				"p1": 0.000052, "median": 0.037221, "rms_dp_pct": 5.321, "rms_dp_pct_err": 0.112,
				"same_top_p_pct": 91.234, "same_top_p_pct_err": 0.225}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePerplexity(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParsePerplexityRejects(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"nan", "Final estimate: PPL = nan +/- nan\n", "not finite"},
		{"inf", "Final estimate: PPL = inf +/- 0.1\n", "not finite"},
		{"garbage", "Final estimate: PPL = abc\n", "not a number"},
		{"empty", "Final estimate: PPL =\n", "missing number"},
		{"zero", "Final estimate: PPL = 0.0000 +/- 0.0\n", "not positive"},
		{"twice", "Final estimate: PPL = 2.5 +/- 0.1\nFinal estimate: PPL = 2.6 +/- 0.1\n", "repeats the value already given on line 1"},
		{"negative err", "Mean    KLD: 0.1 ± -0.2\n", "negative uncertainty"},
		{"bad kld", "Median  KLD: -nan\n", "Median KLD"},
		{"err on plain", "Maximum KLD: 1.0 ± 0.1\n", "unexpected uncertainty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePerplexity(strings.NewReader(tc.in))
			if !errors.Is(err, ErrPerplexityOutput) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %+v, %v; want ErrPerplexityOutput containing %q", got, err, tc.want)
			}
		})
	}
}

// TestParsePerplexityStandIn parses the stand-in's output in both modes as a file would be read.
func TestParsePerplexityStandIn(t *testing.T) {
	in := tempInputs(t, "")
	out, err := exec.Command(script(t, "fake-llama-perplexity-good.sh"), "-m", in.Stub, "--ork-pack", in.Pack, "--kl-divergence").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParsePerplexity(strings.NewReader(string(out)))
	if err != nil || s == nil {
		t.Fatal(s, err)
	}
	if len(s.KLD) != len(KLDKeys()) || s.Chunks != 39 {
		t.Errorf("%d KLD values (%v), %d chunks; want all %d summary values and 39 chunks", len(s.KLD), s.KLD, s.Chunks, len(KLDKeys()))
	}
}

func TestScoresFormatRoundTrip(t *testing.T) {
	s := &Scores{PPL: 2.6798, PPLErr: 0.03512, PPLSource: PPLFromFinalEstimate, Chunks: 4,
		KLD: map[string]float64{"mean": 0.06558, "mean_err": 0.000832, "p99_9": 1.112843, "min": -3e-06}}
	got, err := ParsePerplexity(strings.NewReader(s.Format()))
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip: %+v, %v\nwant %+v\ntext:\n%s", got, err, s, s.Format())
	}
}

// FuzzParsePerplexity: the parser never panics; what it accepts is finite, has a positive
// perplexity and survives a Format/parse round trip unchanged.
func FuzzParsePerplexity(f *testing.F) {
	for _, name := range []string{"fake-llama-perplexity-good.sh", "fake-llama-perplexity-fails.sh"} {
		if b, err := os.ReadFile("testdata/" + name); err == nil {
			f.Add(string(b))
		}
	}
	f.Add("Final estimate: PPL = 2.4871 +/- 0.03228\n")
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParsePerplexity(strings.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrPerplexityOutput) {
				t.Fatalf("error not wrapping ErrPerplexityOutput: %v", err)
			}
			return
		}
		if s == nil {
			return
		}
		for k, v := range s.KLD {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("kld[%s] = %v", k, v)
			}
		}
		if s.PPLSource != "" && !(s.PPL > 0) {
			t.Fatalf("accepted ppl %v", s.PPL)
		}
		if s.PPLSource == "" && s.PPL != 0 {
			t.Fatalf("ppl %v without a source", s.PPL)
		}
		again, err := ParsePerplexity(strings.NewReader(s.Format()))
		if err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("round trip of %+v: %+v, %v\ntext:\n%s", s, again, err, s.Format())
		}
	})
}
