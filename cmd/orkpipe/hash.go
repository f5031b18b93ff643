package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"orkpipe/artifacts"
)

// hashResident is the hash command's budget of mapped file pages resident at once: hashing is its
// only work, so it takes 256 MiB per worker on 2 CPUs instead of a build's 16 MiB: 8 drops of a 2 GiB
// file instead of 32 at session 10's 64 MiB (128 at 16 MiB), each a TLB shootdown
// (docs/performance-log.md, "Hashing, session 10" and "Start-up and hashing, session 11"). The pages are
// page cache that exists anyway; the process's peak RSS is this much more than its start
// (TestHashPathPeakRSS).
const hashResident = 512 << 20

type hashFlags struct {
	check   string
	noCache bool
}

func newHashCommand(opts *globalOptions) *cobra.Command {
	var fl hashFlags
	cmd := &cobra.Command{
		Use:   "hash [--check FILE] [PATH...]",
		Short: "Print BLAKE3 digests of files in b3sum's format, or check them against a list",
		Long: "hash prints \"<64 hex>  <path>\" for each file, like b3sum, so its output can be checked by\n" +
			"`b3sum --check` and vice versa. Digests are reused from the cache's stat cache only while a\n" +
			"file's device, inode, size, mtime and ctime are unchanged. Hash packs and stubs before and after\n" +
			"every run. With --check FILE (\"-\" for standard input) it prints \"path: OK\" or \"path: FAILED\"\n" +
			"for each listed file and fails if any did.",
		RunE: func(cmd *cobra.Command, args []string) error {
			artifacts.SetHashResident(hashResident)
			if fl.check != "" {
				if len(args) > 0 {
					return usagef("hash --check %s: takes no PATH arguments (the paths come from the file)", fl.check)
				}
				return runHashCheck(cmd.Context(), opts, fl)
			}
			if len(args) == 0 {
				return usagef("hash: want at least one PATH (or --check FILE)")
			}
			return runHash(cmd.Context(), opts, fl, args)
		},
	}
	cmd.Flags().StringVarP(&fl.check, "check", "c", "", "read \"<hex>  <path>\" lines from FILE and verify each path")
	cmd.Flags().BoolVar(&fl.noCache, "no-cache", false, "always re-hash; neither use nor update the stat cache")
	return cmd
}

// hashResult is one file's outcome, also the --json form.
type hashResult struct {
	Path     string `json:"path"`
	Digest   string `json:"digest,omitempty"`
	Size     int64  `json:"size"`
	Expected string `json:"expected,omitempty"` // --check only
	OK       *bool  `json:"ok,omitempty"`       // --check only
	Error    string `json:"error,omitempty"`
}

// hashAll hashes paths with up to opts.jobs files at a time; results keep the order of paths.
func hashAll(ctx context.Context, opts *globalOptions, fl hashFlags, paths []string) ([]hashResult, error) {
	hash := artifacts.HashPath
	if !fl.noCache {
		store, err := openCacheForReading(opts)
		if err != nil {
			return nil, err
		}
		defer store.Close()
		hash = store.HashFile
	}
	res := make([]hashResult, len(paths))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(opts.jobs)
	for i, p := range paths {
		g.Go(func() error {
			res[i].Path = p
			o, err := hash(gctx, p)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				res[i].Error = err.Error()
				return nil
			}
			res[i].Digest, res[i].Size = o.Digest.String(), o.Size
			return nil
		})
	}
	return res, g.Wait()
}

func runHash(ctx context.Context, opts *globalOptions, fl hashFlags, paths []string) error {
	res, err := hashAll(ctx, opts, fl, paths)
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range res {
		if r.Error != "" {
			failed++
			fmt.Fprintf(opts.stderr, "orkpipe: %s\n", r.Error)
		}
	}
	if opts.json {
		if err := writeIndentedJSON(opts.stdout, res); err != nil {
			return err
		}
	} else {
		w := bufio.NewWriter(opts.stdout)
		for _, r := range res {
			if r.Error == "" {
				fmt.Fprintln(w, b3sumLine(strings.TrimPrefix(r.Digest, artifacts.Algorithm+":"), r.Path))
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("hash: %d of %d files could not be hashed", failed, len(res))
	}
	return nil
}

func runHashCheck(ctx context.Context, opts *globalOptions, fl hashFlags) error {
	var in io.Reader = os.Stdin
	name := "standard input"
	if fl.check != "-" {
		f, err := os.Open(fl.check)
		if err != nil {
			return fmt.Errorf("hash --check: %w", err)
		}
		defer f.Close()
		in, name = f, fl.check
	}
	want, paths, err := parseCheckList(in, name)
	if err != nil {
		return err
	}
	res, err := hashAll(ctx, opts, fl, paths)
	if err != nil {
		return err
	}
	failed := 0
	w := bufio.NewWriter(opts.stdout)
	for i := range res {
		r := &res[i]
		r.Expected = want[i].String()
		ok := r.Error == "" && r.Digest == r.Expected
		r.OK = &ok
		if !ok {
			failed++
		}
		if opts.json {
			continue
		}
		switch {
		case ok:
			fmt.Fprintf(w, "%s: OK\n", escapePath(r.Path))
		case r.Error != "":
			fmt.Fprintf(w, "%s: FAILED (%s)\n", escapePath(r.Path), r.Error)
		default:
			fmt.Fprintf(w, "%s: FAILED\n", escapePath(r.Path))
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if opts.json {
		if err := writeIndentedJSON(opts.stdout, res); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("hash --check %s: %d of %d files FAILED", name, failed, len(res))
	}
	return nil
}

// parseCheckList reads b3sum lines: "<64 hex>  <path>", or "\<64 hex>  <escaped path>" when the
// path holds a backslash or newline (escaped as \\ and \n).
func parseCheckList(r io.Reader, name string) ([]artifacts.Digest, []string, error) {
	var digests []artifacts.Digest
	var paths []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		escaped := strings.HasPrefix(text, `\`)
		if escaped {
			text = text[1:]
		}
		hexPart, path, ok := strings.Cut(text, "  ")
		bad := func(why string) error {
			return fmt.Errorf("hash --check %s line %d: %s; want \"<64 lowercase hex>  <path>\" as b3sum prints", name, line, why)
		}
		if !ok || path == "" {
			return nil, nil, bad("no two-space separator and path")
		}
		d, err := artifacts.ParseHex(hexPart)
		if err != nil {
			return nil, nil, bad(err.Error())
		}
		if escaped {
			if path, err = unescapePath(path); err != nil {
				return nil, nil, bad(err.Error())
			}
		}
		digests, paths = append(digests, d), append(paths, path)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("hash --check %s: %w", name, err)
	}
	if len(paths) == 0 {
		return nil, nil, fmt.Errorf("hash --check %s: no lines to check", name)
	}
	return digests, paths, nil
}

// b3sumLine formats one output line exactly as b3sum does, escaping odd paths.
func b3sumLine(hex, path string) string {
	if strings.ContainsAny(path, "\\\n") {
		return `\` + hex + "  " + escapePath(path)
	}
	return hex + "  " + path
}

func escapePath(p string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(p)
}

func unescapePath(p string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] != '\\' {
			b.WriteByte(p[i])
			continue
		}
		if i+1 == len(p) {
			return "", fmt.Errorf("path ends in a lone backslash")
		}
		i++
		switch p[i] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		default:
			return "", fmt.Errorf("unknown escape \\%c in path", p[i])
		}
	}
	return b.String(), nil
}

func writeIndentedJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
