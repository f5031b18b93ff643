package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"orkpipe/artifacts"
	"orkpipe/internal/units"
)

func newCacheCommand(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Inspect and maintain the content-addressed cache (dir, verify, gc)",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "dir",
		Short: "Print the cache directory",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runCacheDir(cmd.Context(), opts) },
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "verify",
		Short: "Re-hash every object; quarantine and report corrupt ones (exit 1 if any)",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runCacheVerify(cmd.Context(), opts) },
	})
	var maxSize, maxAge string
	gc := &cobra.Command{
		Use:   "gc --max-size SIZE [--max-age DUR]",
		Short: "Remove least recently used unpinned objects until the cache fits",
		Long: "gc removes objects that are not pinned (pins hold the outputs of the most recent build of each\n" +
			"target): first those unused for longer than --max-age, then the least recently used until the\n" +
			"objects total at most --max-size. Action records whose outputs are removed are dropped. gc needs\n" +
			"the cache to itself and fails if another orkpipe process has it open.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var o artifacts.GCOptions
			var err error
			if maxSize != "" {
				if o.MaxSize, err = units.ParseSize(maxSize); err != nil || o.MaxSize == 0 {
					return usagef("--max-size %q: want a positive size such as 50GiB", maxSize)
				}
			}
			if maxAge != "" {
				if o.MaxAge, err = parseAge(maxAge); err != nil {
					return usagef("--max-age: %v", err)
				}
			}
			if o.MaxSize == 0 && o.MaxAge == 0 {
				return usagef("cache gc: want --max-size and/or --max-age")
			}
			return runCacheGC(cmd.Context(), opts, o)
		},
	}
	gc.Flags().StringVar(&maxSize, "max-size", "", "keep at most this many bytes of objects, e.g. 100GiB")
	gc.Flags().StringVar(&maxAge, "max-age", "", "remove objects unused for longer than this, e.g. 72h or 14d")
	cmd.AddCommand(gc)
	return cmd
}

// parseAge is time.ParseDuration plus a "d" (24 h) suffix.
func parseAge(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%q: want a positive duration such as 72h or 14d", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: want a positive duration such as 72h or 14d", s)
	}
	return d, nil
}

func openCacheStore(opts *globalOptions) (*artifacts.Store, error) {
	dir, err := opts.cache()
	if err != nil {
		return nil, err
	}
	return artifacts.OpenStore(dir)
}

func runCacheDir(_ context.Context, opts *globalOptions) error {
	dir, err := opts.cache()
	if err != nil {
		return err
	}
	if opts.json {
		return writeIndentedJSON(opts.stdout, map[string]string{"dir": dir})
	}
	_, err = fmt.Fprintln(opts.stdout, dir)
	return err
}

func runCacheVerify(ctx context.Context, opts *globalOptions) error {
	s, err := openCacheStore(opts)
	if err != nil {
		return err
	}
	defer s.Close()
	rep, err := s.VerifyAll(ctx)
	if err != nil {
		return fmt.Errorf("cache verify %s: %w", s.Dir(), err)
	}
	if opts.json {
		if err := writeIndentedJSON(opts.stdout, rep); err != nil {
			return err
		}
	} else {
		for _, c := range rep.Corrupt {
			fmt.Fprintf(opts.stdout, "CORRUPT %s  %s\n        %s\n", c.Digest, c.Path, c.Error)
		}
		for _, p := range rep.Strays {
			fmt.Fprintf(opts.stdout, "stray file (not an object, left alone): %s\n", p)
		}
		fmt.Fprintf(opts.stdout, "verified %d objects (%s): %d corrupt\n", rep.Checked, units.FormatSize(rep.Bytes), len(rep.Corrupt))
	}
	if !rep.OK() {
		return fmt.Errorf("cache verify %s: %d corrupt objects quarantined; the builds that made them will re-run", s.Dir(), len(rep.Corrupt))
	}
	return nil
}

func runCacheGC(ctx context.Context, opts *globalOptions, o artifacts.GCOptions) error {
	s, err := openCacheStore(opts)
	if err != nil {
		return err
	}
	defer s.Close()
	rep, err := s.GC(ctx, o)
	if err != nil {
		return err
	}
	if opts.json {
		return writeIndentedJSON(opts.stdout, rep)
	}
	fmt.Fprintf(opts.stdout, "removed %d of %d objects (%s of %s); pinned %d (%s); dropped %d action records, %d entries of vanished paths\n",
		rep.Removed, rep.Objects, units.FormatSize(rep.Freed), units.FormatSize(rep.Bytes),
		rep.Pinned, units.FormatSize(rep.PinnedBytes), rep.ActionsRemoved, rep.EntriesRemoved)
	if rep.OverBudget {
		fmt.Fprintf(opts.stdout, "note: pinned objects alone exceed --max-size\n")
	}
	return nil
}
