package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"orkpipe/artifacts"
	"orkpipe/pipelines/verify"
	"orkpipe/registry"
	"orkpipe/stages/reporthtml"
)

// pageFlags say where a rendered page goes and where a report.json comes from when it is a REF.
type pageFlags struct {
	transportFlags
	out   string
	force bool
	trust []string
}

func (f *pageFlags) register(cmd *cobra.Command) {
	f.transportFlags.register(cmd)
	cmd.Flags().StringVarP(&f.out, "output", "o", "", "write the page to FILE instead of standard output")
	cmd.Flags().BoolVar(&f.force, "force", false, "replace FILE if it exists")
	cmd.Flags().StringArrayVar(&f.trust, "trust", nil, "for a REF: require provenance signed by this ed25519 public key (repeatable)")
}

func newReportCommand(opts *globalOptions) *cobra.Command {
	var f pageFlags
	cmd := &cobra.Command{
		Use:   "report DIR|REPORT.json|REF",
		Short: "Draw a build's report.json as report.html, from a build directory or a pushed artifact",
		Long: `report renders the page the build's report node wrote as report.html, from the build's report.json:
in a build directory DIR (a pulled one too), the file REPORT.json itself, the directory of a
*.orkpack file, or the artifact REF in a registry (only its report.json is pulled, verified like
every pull; with --trust the artifact must carry provenance signed by that key). With the same
orkpipe binary the page is byte-identical to the build's report.html. It goes to standard output,
or to -o FILE (an existing FILE only with --force, unless it already holds exactly this page).`,
		Args: func(cmd *cobra.Command, args []string) error { return asUsage(cobra.ExactArgs(1)(cmd, args)) },
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReport(cmd.Context(), opts, &f, args[0])
		},
	}
	f.register(cmd)
	return cmd
}

func runReport(ctx context.Context, opts *globalOptions, f *pageFlags, target string) error {
	b, from, err := readReportJSON(ctx, opts, f, target)
	if err != nil {
		return err
	}
	page, err := reporthtml.Render(b)
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	return writePage(opts, f, page)
}

// readReportJSON returns the bytes of the report.json target names and where they came from: a
// build directory, a report.json file, a pack file (the report.json beside it) or an artifact REF,
// of which only report.json is pulled (into a temporary directory, removed after).
func readReportJSON(ctx context.Context, opts *globalOptions, f *pageFlags, target string) ([]byte, string, error) {
	st, err := os.Stat(target)
	switch {
	case err == nil:
		if len(f.trust) > 0 {
			return nil, "", usagef("--trust applies to a REF, not to the file %s", target)
		}
		path := target
		if st.IsDir() {
			path = filepath.Join(target, verify.ReportFile)
		} else if strings.HasSuffix(target, verify.PackExt) {
			path = filepath.Join(filepath.Dir(target), verify.ReportFile)
		}
		b, err := verify.ReadReportJSON(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, "", usagef("%s: no %s (want a build directory, its report.json, its pack, or an artifact REF)", path, verify.ReportFile)
		}
		return b, path, err
	case !errors.Is(err, fs.ErrNotExist):
		return nil, "", err
	case !looksLikeRef(target):
		return nil, "", usagef("%s: no such file or directory, and not an artifact reference (HOST[:PORT]/REPO[:TAG|@DIGEST])", target)
	}
	ropts, err := f.options(target)
	if err != nil {
		return nil, "", err
	}
	tr, err := trustOptions(f.trust)
	if err != nil {
		return nil, "", err
	}
	ropts = append(ropts, tr...)
	dir, err := os.MkdirTemp("", "orkpipe-report-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	ropts = append(ropts, registry.WithFiles(verify.ReportFile), registry.WithLogger(opts.logger))
	res, err := registry.Pull(ctx, target, dir, ropts...)
	if err != nil {
		return nil, "", err
	}
	b, err := verify.ReadReportJSON(filepath.Join(dir, verify.ReportFile))
	return b, fmt.Sprintf("%s (%s) %s", target, res.Digest, verify.ReportFile), err
}

// writePage writes page to -o FILE or to standard output. An existing FILE that already holds exactly
// the page is left as it is; any other is replaced only with --force. FILE is written whole or not at
// all: a temp file in its directory, renamed (or, without --force, linked) into place.
func writePage(opts *globalOptions, f *pageFlags, page []byte) error {
	if f.out == "" {
		_, err := opts.stdout.Write(page)
		return err
	}
	if st, err := os.Lstat(f.out); err == nil {
		if st.Mode().IsRegular() && st.Size() == int64(len(page)) {
			if old, err := os.ReadFile(f.out); err == nil && bytes.Equal(old, page) {
				return nil
			}
		}
		switch {
		case !st.Mode().IsRegular():
			return fmt.Errorf("-o %s: it exists and is not a regular file", f.out)
		case !f.force:
			return fmt.Errorf("-o %s: %w: it exists and holds other bytes", f.out, artifacts.ErrClobber)
		}
	}
	// Locked while written, so that one killed before the rename is removed by the next writer
	// into the directory (artifacts.CreateTemp).
	tmp, name, err := artifacts.CreateTemp(f.out)
	if err != nil {
		return fmt.Errorf("-o %s: %w", f.out, err)
	}
	defer tmp.Close()
	defer os.Remove(name) // before the lock is released; nothing once renamed
	if _, err := tmp.Write(page); err != nil {
		return fmt.Errorf("writing %s: %w", f.out, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", f.out, err)
	}
	if f.force {
		return os.Rename(name, f.out)
	}
	if err := os.Link(name, f.out); errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("-o %s: %w: it exists (created meanwhile)", f.out, artifacts.ErrClobber)
	} else if err != nil {
		return fmt.Errorf("-o %s: %w", f.out, err)
	}
	return nil
}
