package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sync"

	"github.com/spf13/cobra"

	"orkpipe/internal/units"
)

// globalOptions holds the flags every command shares. Commands read them after flag parsing.
type globalOptions struct {
	cacheDir string // --cache, ORKPIPE_CACHE, default os.UserCacheDir()/orkpipe
	jobs     int    // -j
	memText  string // --mem as typed
	json     bool   // --json
	verbose  int    // -v (repeatable)
	cpuProf  string // --cpuprofile
	memProf  string // --memprofile

	stopProfile func() error // set when --cpuprofile or --memprofile started a profile

	stdout io.Writer
	stderr io.Writer
	logger *slog.Logger
}

// newGlobalOptions returns the options of a command writing to stdout and stderr. A build writes
// them from several goroutines at once: the progress sink, the logger, and os/exec's copy of a child
// process's stderr (orkpipe-dagger's log) when stderr is not a file. Writes to an *os.File are safe
// that way and it is kept as it is (the child then writes the descriptor itself, and terminals are
// still recognized); any other writer (a test's buffer) is wrapped so that every write to it takes
// one lock, shared when stdout and stderr are the same writer.
func newGlobalOptions(stdout, stderr io.Writer) *globalOptions {
	out := lockWriter(stdout)
	errOut := lockWriter(stderr)
	if t := reflect.TypeOf(stdout); t != nil && t.Comparable() && stdout == stderr {
		errOut = out
	}
	return &globalOptions{stdout: out, stderr: errOut, jobs: runtime.NumCPU()}
}

// lockedWriter serializes the writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// lockWriter returns w itself when it is an *os.File, else w behind a lock.
func lockWriter(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

// cache returns the cache directory after applying the flag, the environment and the default.
func (o *globalOptions) cache() (string, error) {
	if o.cacheDir != "" {
		return filepath.Abs(o.cacheDir)
	}
	if env := os.Getenv("ORKPIPE_CACHE"); env != "" {
		return filepath.Abs(env)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory: set --cache or ORKPIPE_CACHE: %w", err)
	}
	return filepath.Join(base, "orkpipe"), nil
}

// memBudget returns the --mem budget in bytes (default 75% of physical memory).
func (o *globalOptions) memBudget() (int64, error) {
	if o.memText == "" {
		total, err := physicalMemory()
		if err != nil {
			return 0, fmt.Errorf("cannot size the default --mem budget: %w; pass --mem explicitly", err)
		}
		return total / 4 * 3, nil
	}
	n, err := units.ParseSize(o.memText)
	if err != nil {
		return 0, usagef("--mem: %v", err)
	}
	if n <= 0 {
		return 0, usagef("--mem: must be positive, got %q", o.memText)
	}
	return n, nil
}

func newRootCommand(opts *globalOptions) *cobra.Command {
	root := &cobra.Command{
		Use:           "orkpipe",
		Short:         "Build, publish and verify RK3588 NPU model packs from GGUF models",
		Long:          "orkpipe turns GGUF language models into orkpacks (quantized, NPU-tiled weights) and stub GGUFs,\nas a content-addressed, cached DAG. See README.md.",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			level := slog.LevelWarn
			switch {
			case opts.verbose == 1:
				level = slog.LevelInfo
			case opts.verbose >= 2:
				level = slog.LevelDebug
			}
			opts.logger = slog.New(slog.NewTextHandler(opts.stderr, &slog.HandlerOptions{Level: level}))
			slog.SetDefault(opts.logger)
			if opts.jobs < 1 {
				return usagef("-j: must be at least 1, got %d", opts.jobs)
			}
			return opts.startProfile()
		},
	}
	root.SetOut(opts.stdout)
	root.SetErr(opts.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return asUsage(err) })
	pf := root.PersistentFlags()
	pf.StringVar(&opts.cacheDir, "cache", "", "cache directory (default $ORKPIPE_CACHE or the user cache dir + /orkpipe)")
	pf.IntVarP(&opts.jobs, "jobs", "j", opts.jobs, "nodes run in parallel")
	pf.StringVar(&opts.memText, "mem", "", "memory budget, e.g. 6GiB (default 75% of physical memory)")
	pf.BoolVar(&opts.json, "json", false, "machine-readable output (JSON, or JSON Lines for build events)")
	pf.CountVarP(&opts.verbose, "verbose", "v", "log more (-v info, -vv debug)")
	pf.StringVar(&opts.cpuProf, "cpuprofile", "", "write a CPU profile of the whole command (pprof format; a build labels samples by node and stage) to this file")
	pf.StringVar(&opts.memProf, "memprofile", "", "write an allocation profile of the whole command (pprof format: every sampled allocation, and what was live at the end) to this file")

	for _, newCmd := range commands {
		root.AddCommand(newCmd(opts))
	}
	usageArgs(root)
	return root
}

// commands lists every subcommand constructor. Each lives in its own file as newXCommand(opts).
var commands = []func(*globalOptions) *cobra.Command{
	newVersionCommand,
	newTokenizeCommand, newEvalCommand,
	newDemoCommand, newPlanCommand, newExplainCommand,
	newStubCommand, newInspectCommand,
	newHashCommand, newCacheCommand,
	newQErrCommand,
	newPackCommand, newRankCommand, newDiffCommand, newReportCommand,
	newCompareCommand,
	newPushCommand, newPullCommand, newDescribeCommand, newKeyCommand,
	newBuildCommand,
	newNodeCommand,
	newVerifyCommand,
}
