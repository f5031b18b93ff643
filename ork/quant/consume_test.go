package quant

import (
	"context"
	"slices"
	"testing"
)

// TestGPTQConsumeHessian: handing the Hessian over (WithConsumeHessian) gives exactly the result of
// working on a copy — rotated or not, with and without K padding — and without it the caller's
// Hessian is left untouched.
func TestGPTQConsumeHessian(t *testing.T) {
	for _, tc := range []struct {
		name   string
		k      int
		rotate bool
	}{{"plain", 128, false}, {"rotated", 128, true}, {"rotated-padded", 172, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m, err := SyntheticWeight("w", 48, tc.k, 3)
			if err != nil {
				t.Fatal(err)
			}
			acts, err := CorrelatedActivations(512, tc.k, 4)
			if err != nil {
				t.Fatal(err)
			}
			h := NewHessian(tc.k)
			if err := h.Add(acts.Data, acts.Rows); err != nil {
				t.Fatal(err)
			}
			orig := slices.Clone(h.Data)
			opts := []Option{WithBits(4), WithGroup(32), WithRotation(tc.rotate, 9)}
			want, err := GPTQ(ctx, m, h, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(h.Data, orig) {
				t.Fatal("GPTQ without WithConsumeHessian modified the caller's Hessian")
			}
			got, err := GPTQ(ctx, m, h, append(opts, WithConsumeHessian())...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Codes, want.Codes) || !slices.Equal(got.Scales, want.Scales) || got.QErr != want.QErr {
				t.Fatalf("consuming the Hessian changed the result: qerr %v vs %v", got.QErr, want.QErr)
			}
		})
	}
}
