package boardhost

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzDecodeReport feeds board verify reports (what `compare` and `pull` read) to DecodeReport. What it
// accepts must encode and decode again to the same report, and compare against itself and against a real
// report as `compare --json` does without a panic and with a comparison that encodes: a report compared
// with itself that can be compared at all differs in nothing and scores a relative difference of zero.
func FuzzDecodeReport(f *testing.F) {
	plain, _ := verifiedReport(f, fakeBoard, "ORKPACK-Q8")
	kld, _ := verifiedReport(f, fakeBoard, "ORKPACK-Q4", "--kl-divergence")
	tiny, _ := verifiedReport(f, fakeBoard, "ORKPACK-Q4", "--kl-divergence")
	tiny.Run.Scores.KLD["mean"] = 5e-324 // against kld's 0.06558: a relative difference beyond float64
	for _, r := range []*Report{plain, kld, tiny} {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeReport(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrReport) {
				t.Fatalf("error %v does not wrap ErrReport", err)
			}
			return
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("accepted report does not encode: %v", err)
		}
		again, err := DecodeReport(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("accepted report encodes as %s, which reads back as %v", b, err)
		}
		if b2, _ := json.Marshal(again); !bytes.Equal(b, b2) {
			t.Fatalf("round trip changed the report:\n%s\n%s", b, b2)
		}
		for _, other := range []*Report{r, plain, kld} {
			for _, cross := range []bool{false, true} {
				c, err := Compare(r, other, cross)
				if c == nil {
					continue
				}
				if _, jerr := json.Marshal(c); jerr != nil {
					t.Fatalf("comparison (cross-machine %t) does not encode: %v", cross, jerr)
				}
				if other != r || err != nil {
					continue
				}
				if !c.Comparable || len(c.Mismatches) > 0 {
					t.Fatalf("a report compared with itself: %+v", c)
				}
				for _, m := range c.Metrics {
					if m.RelDiff != nil && *m.RelDiff != 0 {
						t.Fatalf("a report compared with itself: metric %+v", m)
					}
				}
			}
		}
	})
}
