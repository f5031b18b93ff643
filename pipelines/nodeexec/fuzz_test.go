package nodeexec_test

import (
	"testing"

	"orkpipe/pipelines/nodeexec"
)

// FuzzDecodeResult: DecodeResult never panics, and whatever it accepts satisfies its contract.
func FuzzDecodeResult(f *testing.F) {
	f.Add([]byte(`{"format":"orkpipe-node-result 1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := nodeexec.DecodeResult(b)
		if err != nil {
			return
		}
		if r.Format != nodeexec.ResultFormat || r.Key.IsZero() || r.Stage == "" || r.Version < 1 || len(r.Outputs) == 0 {
			t.Fatalf("accepted %+v", r)
		}
		seen := map[string]bool{}
		for _, o := range r.Outputs {
			if o.Name == "" || o.Digest.IsZero() || o.Size < 0 || seen[o.Name] {
				t.Fatalf("accepted output %+v", o)
			}
			seen[o.Name] = true
		}
	})
}
