package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
)

func newPackCommand(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pack",
		Short: "Work with orkpacks (the NPU weight packs)",
	}
	cmd.AddCommand(newPackVerifyCommand(opts))
	return cmd
}

func newPackVerifyCommand(opts *globalOptions) *cobra.Command {
	var boardFlag string
	cmd := &cobra.Command{
		Use:   "verify PACK",
		Short: "Verify an orkpack: header, footer, index, every entry's BLAKE3 and layout, and the domain plan",
		Long: "verify opens the pack (header, footer, index digest), reads and hashes every entry a page at a time and checks\n" +
			"it for everything decoding would reject (its layout's zero padding, finite scales) without untiling it, and\n" +
			"recomputes the domain plan with the board profile. It exits non-zero on any failure.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPackVerify(cmd.Context(), opts, args[0], boardFlag)
		},
	}
	cmd.Flags().StringVar(&boardFlag, "board", "", "board profile: built-in name or JSON/YAML file (default: the one the pack was planned for)")
	return cmd
}

type packVerifyJSON struct {
	Path        string   `json:"path"`
	OK          bool     `json:"ok"`
	Version     uint32   `json:"version,omitempty"`
	Entries     int      `json:"entries"`
	IndexDigest string   `json:"index_digest,omitempty"`
	Board       string   `json:"board,omitempty"`
	Domains     int      `json:"domains"`
	Errors      []string `json:"errors,omitempty"`
}

func runPackVerify(ctx context.Context, opts *globalOptions, path, boardFlag string) error {
	res := packVerifyJSON{Path: path}
	err := verifyPack(ctx, path, boardFlag, &res)
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			return err
		}
		res.Errors = splitJoined(err)
	}
	res.OK = err == nil
	if opts.json {
		if jerr := json.NewEncoder(opts.stdout).Encode(res); jerr != nil {
			return jerr
		}
	} else if res.OK {
		fmt.Fprintf(opts.stdout, "%s: ok: orkpack v%d, %d entries verified (hash, layout, finite scales), index %s, plan of %d domains on %s matches\n",
			path, res.Version, res.Entries, res.IndexDigest, res.Domains, res.Board)
	} else {
		for _, e := range res.Errors {
			fmt.Fprintf(opts.stdout, "%s: FAILED: %s\n", path, e)
		}
	}
	if err != nil {
		return fmt.Errorf("pack verify %s: %d failure(s)", path, len(res.Errors))
	}
	return nil
}

func verifyPack(ctx context.Context, path, boardFlag string, res *packVerifyJSON) error {
	r, err := pack.Open(ctx, path)
	if err != nil {
		return err
	}
	defer r.Close()
	res.Version, res.Entries, res.IndexDigest = r.Version(), len(r.Entries()), r.IndexDigest().String()
	res.Board, res.Domains = r.Board().Name, r.Board().Domains
	p, err := packProfile(r, path, boardFlag)
	if err != nil {
		return err
	}
	errs := []error{r.VerifyAll(ctx), board.CheckPlan(r.Board(), r.Entries(), p)}
	if res, ok := r.Residency(); ok {
		errs = append(errs, board.CheckResidency(res, r.Entries(), p))
	}
	return errors.Join(errs...)
}

// splitJoined flattens an errors.Join tree into one message per failure.
func splitJoined(err error) []string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, splitJoined(e)...)
		}
		return out
	}
	return []string{err.Error()}
}
