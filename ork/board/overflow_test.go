package board_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
)

// hugeProfile is a valid profile whose domains hold nearly 2^63 bytes, so that only the sums of resident
// bytes can fail, and whose segments are whole rows (a 2^24-wide entry is one segment).
func hugeProfile() board.Profile {
	p := board.RK3588()
	p.Name, p.DomainCeiling, p.Headroom, p.MaxSegmentK, p.MaxDomains = "huge", math.MaxInt64, 0, 1<<24, 1
	return p
}

// widest returns n F16 entries of the largest shape (K = N = 2^24: 2^49 resident bytes each, so 2^14 of
// them sum to 2^63), named by name(i).
func widest(n int, name func(i int) string) []pack.Entry {
	es := make([]pack.Entry, n)
	for i := range es {
		es[i] = pack.Entry{Meta: pack.Meta{Name: name(i), DType: pack.F16, K: 1 << 24, N: 1 << 24, Source: pack.Digest{1}}}
	}
	return es
}

// TestSumsOverflow: sums of resident bytes and of routing lookups near math.MaxInt64 fail with an error
// naming the entry or expert that overflows them, instead of wrapping to a negative sum that passes every
// "fits" comparison (Choose kept every expert of a wrapped total, PlanDomains returned a plan whose total
// was negative).
func TestSumsOverflow(t *testing.T) {
	const half = math.MaxInt64/2 + 1
	p := hugeProfile()
	cases := []struct {
		name string
		run  func() error
		want string // "" when it must succeed
	}{
		{"choose: bytes sum to MaxInt64-1", func() error {
			hot, err := board.Choose([]board.Expert{{Index: 0, Bytes: half - 1, Lookups: 1}, {Index: 1, Bytes: half - 1, Lookups: 1}}, math.MaxInt64)
			if err == nil && (!hot[0] || !hot[1]) {
				err = fmt.Errorf("hot %v, want both", hot)
			}
			return err
		}, ""},
		{"choose: bytes overflow", func() error {
			_, err := board.Choose([]board.Expert{{Layer: 3, Index: 0, Bytes: half, Lookups: 1}, {Layer: 3, Index: 1, Bytes: half, Lookups: 1}}, 1<<40)
			return err
		}, "expert 1 of layer 3: 4611686018427387904 bytes, 1 lookups: the experts' bytes or lookups up to it overflow int64"},
		{"choose: lookups overflow", func() error {
			_, err := board.Choose([]board.Expert{{Layer: 2, Index: 5, Bytes: 4096, Lookups: math.MaxInt64 - 1}, {Layer: 2, Index: 6, Bytes: 8192, Lookups: 2}}, 4096)
			return err
		}, "expert 6 of layer 2: 8192 bytes, 2 lookups: the experts' bytes or lookups up to it overflow int64"},
		{"plan domains: resident bytes overflow", func() error {
			_, err := board.PlanDomains(widest(1<<14, func(i int) string { return fmt.Sprintf("w%d", i) }), p)
			return err
		}, `entry "w16383" (index 16383): its 562949953421312 resident bytes on huge overflow the 9222809086901354496 bytes of the entries before it`},
		{"plan domains: one entry short of overflowing", func() error {
			pl, err := board.PlanDomains(widest(1<<14-1, func(i int) string { return fmt.Sprintf("w%d", i) }), p)
			if err == nil && pl.Total != (1<<14-1)<<49 {
				err = fmt.Errorf("total %d", pl.Total)
			}
			return err
		}, ""},
		{"experts: one expert's entries overflow", func() error {
			_, _, err := board.Experts(widest(1<<14, func(i int) string { return fmt.Sprintf("blk.7.t%d_exps.weight#4", i) }), p)
			return err
		}, `expert 4 of layer 7: entry "blk.7.t16383_exps.weight#4"'s 562949953421312 resident bytes on huge overflow its other entries'`},
		{"residency window: the experts' bytes overflow", func() error {
			_, err := board.PlanResidency(widest(1<<14, func(i int) string { return fmt.Sprintf("blk.1.ffn_up_exps.weight#%d", i) }),
				func(int, int) int64 { return 1 }, board.Budget{Auto: true}, 1, p)
			return err
		}, "expert 16383 of layer 1: its 562949953421312 resident bytes on huge overflow the experts' before it"},
		{"residency window: domains x capacity overflow", func() error {
			q := hugeProfile()
			q.MaxDomains = 2
			_, err := board.PlanResidency(widest(1, func(int) string { return "blk.0.ffn_up_exps.weight#0" }),
				func(int, int) int64 { return 1 }, board.Budget{Auto: true}, 2, q)
			if !errors.Is(err, board.ErrProfile) {
				return fmt.Errorf("%v does not wrap ErrProfile", err)
			}
			return err
		}, `bad board profile "huge": residency over 2 domains of 9223372036854775807 bytes: the window overflows int64`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("no error, want one containing %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q\nwant it to contain %q", err, tc.want)
			case tc.want != "" && !strings.Contains(tc.name, "choose") && !strings.Contains(tc.name, "capacity") && !errors.Is(err, board.ErrDoesNotFit):
				t.Fatalf("error %v does not wrap ErrDoesNotFit", err)
			}
		})
	}
}
