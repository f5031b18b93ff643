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
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/verify"
	"orkpipe/stages"
)

func newCacheCommand(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Inspect and maintain the content-addressed cache (dir, du, verify, gc)",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "dir",
		Short: "Print the cache directory",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runCacheDir(cmd.Context(), opts) },
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "du",
		Short: "Show what the cache holds on disk, by the stage that made it, and what pins keep from gc",
		Long: "du lists the cache's objects by the stage whose action records name them (calibrate's Hessians,\n" +
			"finalize's weights, ...; objects no record names under \"(no record)\"), the disk\n" +
			"they take (a stub's holes take none) and how much of it pins keep (the outputs of each target's latest\n" +
			"build): gc --max-size can free the rest; and what gc --outdated frees (what only action records of\n" +
			"stage versions this orkpipe does not run name, and the records downstream of those). It changes\n" +
			"nothing, and also reads a cache this process cannot write.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCacheDu(cmd.Context(), opts) },
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "verify",
		Short: "Re-hash every object; quarantine and report corrupt ones (exit 1 if any)",
		Long: "verify re-hashes every object of the cache and reports those whose bytes no longer match their\n" +
			"name, moving them to quarantine/ (their builds then run again); it exits 1 if it found any. On a\n" +
			"cache this process cannot write (a read-only mount, another user's) it reports them and moves nothing.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCacheVerify(cmd.Context(), opts) },
	})
	var maxSize, maxAge string
	var outdated bool
	gc := &cobra.Command{
		Use:   "gc [--outdated] [--max-size SIZE] [--max-age DUR]",
		Short: "Remove unpinned objects: what only other orkpipe versions' records name, the oldest, the least recently used",
		Long: "gc removes objects that are not pinned (pins hold the outputs of the most recent build of each\n" +
			"target): with --outdated, those that only action records of stage versions this orkpipe does not\n" +
			"run name (an older orkpipe's, whose nodes this one never hits, or a newer one's), and those records,\n" +
			"and the same downstream: the records of nodes that read such objects (as the cache's build history\n" +
			"remembers them: a tile of an outdated finalize's weight, the pack of that tile, ...), and the objects\n" +
			"only they name (run it after rebuilding with this orkpipe, which keeps what the rebuild used; before\n" +
			"it, the nodes after a stage whose new version makes the same bytes would run again);\n" +
			"then those unused for longer than --max-age, then the least recently used until the objects total\n" +
			"at most --max-size. Action records whose outputs are removed are dropped. gc needs the cache to\n" +
			"itself and fails if another orkpipe process has it open.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var o artifacts.GCOptions
			var err error
			if outdated {
				o.Outdated = outdatedRecord
				if o.Inputs, err = recordedInputs(cmd.Context(), opts); err != nil {
					return err
				}
			}
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
			if o.MaxSize == 0 && o.MaxAge == 0 && !outdated {
				return usagef("cache gc: want --outdated, --max-size and/or --max-age")
			}
			return runCacheGC(cmd.Context(), opts, o)
		},
	}
	gc.Flags().StringVar(&maxSize, "max-size", "", "keep at most this many bytes of objects, e.g. 100GiB")
	gc.Flags().StringVar(&maxAge, "max-age", "", "remove objects unused for longer than this, e.g. 72h or 14d")
	gc.Flags().BoolVar(&outdated, "outdated", false, "remove what only action records of stage versions this orkpipe does not run name, and those records, and the same for the records downstream of them")
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

// openCacheStore opens the cache for a command that writes to it (gc, push, a build). A cache this
// process cannot write is refused, the error saying so and naming the path it may not write.
func openCacheStore(opts *globalOptions) (*artifacts.Store, error) {
	dir, err := opts.cache()
	if err != nil {
		return nil, err
	}
	if err := artifacts.Writable(dir); err != nil {
		return nil, fmt.Errorf("%w; this command writes to the cache (those that only read it, such as plan and cache du, open it read-only): pass --cache DIR or set ORKPIPE_CACHE to a writable one", err)
	}
	return artifacts.OpenStore(dir)
}

// openCacheForReading opens the cache for a command that only reads it (plan, build --plan, explain
// --graph, cache du, cache verify, hash): as openCacheStore does where this process may write it, so
// that what the command learns on the way is kept as by any other (source hashes in the stat cache,
// use times for gc, corrupt objects quarantined); read-only (artifacts.OpenStoreReadOnly) where it
// may not (a read-only mount, another user's cache shared with CI or board hosts), which is logged
// at info level (-v).
func openCacheForReading(opts *globalOptions) (*artifacts.Store, error) {
	dir, err := opts.cache()
	if err != nil {
		return nil, err
	}
	if werr := artifacts.Writable(dir); werr != nil {
		s, err := artifacts.OpenStoreReadOnly(dir)
		if err != nil {
			return nil, fmt.Errorf("%w (opened read-only: %v)", err, werr)
		}
		opts.logger.Info("the cache is not writable: opened read-only (nothing learned is kept: source hashes, use times)", "dir", dir, "why", werr)
		return s, nil
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

func runCacheDu(ctx context.Context, opts *globalOptions) error {
	s, err := openCacheForReading(opts)
	if err != nil {
		return err
	}
	defer s.Close()
	inputs, err := recordedInputs(ctx, opts)
	if err != nil {
		return err
	}
	rep, err := s.Usage(ctx, outdatedRecord, inputs)
	if err != nil {
		return fmt.Errorf("cache du %s: %w", s.Dir(), err)
	}
	if opts.json {
		return writeIndentedJSON(opts.stdout, rep)
	}
	w := len("(no record)")
	for _, u := range rep.Stages {
		w = max(w, len(u.Stage))
	}
	row := func(name, objects, disk, pinned, outdated string) {
		fmt.Fprintf(opts.stdout, "%-*s  %7s  %11s  %11s  %11s\n", w, name, objects, disk, pinned, outdated)
	}
	row("stage", "objects", "on disk", "pinned", "outdated")
	for _, u := range rep.Stages {
		name := u.Stage
		if name == "" {
			name = "(no record)"
		}
		row(name, strconv.Itoa(u.Objects), units.FormatSize(u.Disk), units.FormatSize(u.PinnedDisk), units.FormatSize(u.OutdatedDisk))
	}
	row("total", strconv.Itoa(rep.Objects), units.FormatSize(rep.Disk), units.FormatSize(rep.PinnedDisk), units.FormatSize(rep.OutdatedDisk))
	_, err = fmt.Fprintf(opts.stdout, "%s: %d objects, %s on disk (%s of content); pins keep %s, gc --max-size can free %s, gc --outdated %s\n",
		s.Dir(), rep.Objects, units.FormatSize(rep.Disk), units.FormatSize(rep.Bytes), units.FormatSize(rep.PinnedDisk), units.FormatSize(rep.Disk-rep.PinnedDisk),
		units.FormatSize(rep.OutdatedDisk))
	return err
}

// recordedInputs is artifacts.GCOptions.Inputs from the cache's build history
// (engine.RecordedInputs): the inputs of the nodes of the builds it remembers. A build record it
// cannot read is logged and followed no further (gc keeps what it cannot follow).
func recordedInputs(ctx context.Context, opts *globalOptions) (func(artifacts.Digest) ([]artifacts.Digest, bool), error) {
	dir, err := opts.cache()
	if err != nil {
		return nil, err
	}
	inputs, skipped, err := engine.RecordedInputs(ctx, engine.HistoryDir(dir))
	if err != nil {
		return nil, fmt.Errorf("cache %s: %w", dir, err)
	}
	for _, e := range skipped {
		opts.logger.Warn("a build record left out: gc does not follow what it recorded downstream", "err", e)
	}
	return func(key artifacts.Digest) ([]artifacts.Digest, bool) { in, ok := inputs[key]; return in, ok }, nil
}

// outdatedRecord reports whether an action record of stage at version is one this orkpipe never hits:
// a stage it does not run (verify-board's attestations included: it is registered here), or another
// version of one (artifacts.GCOptions.Outdated).
func outdatedRecord(stage string, version int) bool {
	verify.RegisterKind()
	k, err := stages.Lookup(stage)
	return err != nil || k.Version() != version
}

func runCacheVerify(ctx context.Context, opts *globalOptions) error {
	s, err := openCacheForReading(opts)
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
	if !rep.OK() && s.ReadOnly() {
		return fmt.Errorf("cache verify %s: %d corrupt objects, not quarantined: the cache is not writable (its owner's cache verify quarantines them)", s.Dir(), len(rep.Corrupt))
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
	outdated := strconv.Itoa(rep.Outdated) + " outdated"
	if rep.Downstream > 0 {
		outdated += fmt.Sprintf(", %d of them downstream of others", rep.Downstream)
	}
	fmt.Fprintf(opts.stdout, "removed %d of %d objects (%s of %s); pinned %d (%s); dropped %d action records (%s), %d entries of vanished paths\n",
		rep.Removed, rep.Objects, units.FormatSize(rep.Freed), units.FormatSize(rep.Bytes),
		rep.Pinned, units.FormatSize(rep.PinnedBytes), rep.ActionsRemoved+rep.Outdated, outdated, rep.EntriesRemoved)
	if rep.Sessions+rep.Locks+rep.TempFiles > 0 {
		fmt.Fprintf(opts.stdout, "removed %d temp sessions of dead processes, %d node lock files, %d temp files killed writers left\n",
			rep.Sessions, rep.Locks, rep.TempFiles)
	}
	if rep.OverBudget {
		fmt.Fprintf(opts.stdout, "note: pinned objects alone exceed --max-size\n")
	}
	return nil
}
