package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
	"orkpipe/ork/tile"
	"orkpipe/stages"
)

func newRankCommand(opts *globalOptions) *cobra.Command {
	var boardFlag string
	cmd := &cobra.Command{
		Use:   "rank PACK",
		Short: "List a pack's entries worst qerr first, with what promoting each to I8_ROT or I4_ROT_A8 would cost",
		Long: "rank sorts the pack's entries by quantization error, worst first (with the activation bits and clip\n" +
			"each runs with), and prices promoting each one to\n" +
			"I8_ROT or I4_ROT_A8: the change in on-disk bytes (entry data) and in resident bytes on the board\n" +
			"(board.ResidentBytes with the pack's profile, or --board). Costs are in MiB; 0 when already that dtype.\n" +
			"An unrotated entry is priced with the rotation finalize gives it by default: K padded to a\n" +
			"multiple of 32 (500 becomes 512) and the Hadamard block that divides it; a recipe's rotation_block\n" +
			"may pad K further, and then the costs of that build differ.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRank(cmd.Context(), opts, args[0], boardFlag)
		},
	}
	cmd.Flags().StringVar(&boardFlag, "board", "", "board profile: built-in name or JSON/YAML file (default: the one the pack was planned for)")
	return cmd
}

// promotionTargets are the dtypes rank prices.
var promotionTargets = []pack.DType{pack.I8Rot, pack.I4RotA8}

type rankCost struct {
	DiskBytes     int64   `json:"disk_bytes"`
	ResidentBytes int64   `json:"resident_bytes"`
	DiskMiB       float64 `json:"disk_mib"`
	ResidentMiB   float64 `json:"resident_mib"`
}

type rankEntry struct {
	Name    string              `json:"name"`
	DType   string              `json:"dtype"`
	K       int                 `json:"k"`
	N       int                 `json:"n"`
	ActBits int                 `json:"act_bits"`
	ActClip float32             `json:"act_clip"`
	QErr    float64             `json:"qerr"`
	Promote map[string]rankCost `json:"promote,omitempty"` // absent for F16 (no quantized promotion)
}

func runRank(ctx context.Context, opts *globalOptions, path, boardFlag string) error {
	r, err := pack.Open(ctx, path)
	if err != nil {
		return err
	}
	defer r.Close()
	p, err := packProfile(r, path, boardFlag)
	if err != nil {
		return err
	}
	entries := r.Entries()
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].QErr > entries[j].QErr })
	var out []rankEntry
	for _, e := range entries {
		re := rankEntry{Name: e.Name, DType: e.DType.String(), K: e.K, N: e.N, ActBits: e.ActBits, ActClip: e.ActClip, QErr: e.QErr}
		if e.DType != pack.F16 {
			re.Promote = map[string]rankCost{}
			for _, to := range promotionTargets {
				c, err := promotionCost(e, to, p)
				if err != nil {
					return err
				}
				re.Promote[to.String()] = c
			}
		}
		out = append(out, re)
	}
	if opts.json {
		return json.NewEncoder(opts.stdout).Encode(struct {
			Board   string      `json:"board"`
			Entries []rankEntry `json:"entries"`
		}{p.Name, append([]rankEntry{}, out...)})
	}
	fmt.Fprintf(opts.stdout, "%s: %d entries, worst qerr first; promotion costs in MiB on board %s\n\n", path, len(out), p.Name)
	tw := tabwriter.NewWriter(opts.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDTYPE\tK x N\tACT\tCLIP\tQERR\tI8_ROT DISK\tI8_ROT RESIDENT\tI4_ROT_A8 DISK\tI4_ROT_A8 RESIDENT")
	for _, e := range out {
		fmt.Fprintf(tw, "%s\t%s\t%d x %d\t%d\t%s\t%.5f", shown(e.Name), e.DType, e.K, e.N, e.ActBits, clipText(e.ActClip), e.QErr)
		for _, to := range promotionTargets {
			if c, ok := e.Promote[to.String()]; ok {
				fmt.Fprintf(tw, "\t%+.2f\t%+.2f", c.DiskMiB, c.ResidentMiB)
			} else {
				fmt.Fprint(tw, "\t-\t-")
			}
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// promotionCost is the change in on-disk and resident bytes if e were stored as dtype to. The sizes depend on
// dtype, K, N and group only; a rotation is required by the rotated dtypes, so an unrotated entry is priced
// with the Hadamard rotation finalize gives it by default (stages.FinalizeParams.HadamardRotation without a
// rotation_block): its K padded as finalize pads it (500 to 512), which changes the tiles, the scale groups
// and the board's companion rule. A recipe's rotation_block may pad K further than rank prices. An entry
// already rotated keeps its K and rotation.
func promotionCost(e pack.Entry, to pack.DType, p board.Profile) (rankCost, error) {
	m := e.Meta
	m.DType, m.ActBits = to, 0
	if !to.Int4() {
		m.Nibbles = tile.LowFirst
	}
	if m.Rotation.Kind == pack.RotNone {
		r, err := stages.FinalizeParams{K: e.K, N: e.N, Rotation: "hadamard"}.HadamardRotation()
		if err != nil {
			return rankCost{}, fmt.Errorf("pricing %s as %s: rotating K = %d: %w", e.Name, to, e.K, err)
		}
		m.K, m.Rotation = r.Padded, pack.Rotation{Kind: pack.RotHadamardUnsigned, Block: r.Block}
	}
	pe, err := pack.Geometry(m, e.SegmentK)
	if err != nil {
		return rankCost{}, fmt.Errorf("pricing %s as %s: %w", e.Name, to, err)
	}
	before, err := board.ResidentBytes(e, p)
	if err != nil {
		return rankCost{}, err
	}
	after, err := board.ResidentBytes(pe, p)
	if err != nil {
		return rankCost{}, err
	}
	c := rankCost{DiskBytes: pe.Length - e.Length, ResidentBytes: after - before}
	c.DiskMiB, c.ResidentMiB = float64(c.DiskBytes)/(1<<20), float64(c.ResidentBytes)/(1<<20)
	return c, nil
}
