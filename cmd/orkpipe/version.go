package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"orkpipe/internal/buildinfo"
)

func newVersionCommand(opts *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print orkpipe's version, VCS revision, dirty flag and the digest of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runVersion(opts)
		},
	}
}

func runVersion(opts *globalOptions) error {
	info, err := buildinfo.Get()
	if err != nil {
		return err
	}
	if opts.json {
		return json.NewEncoder(opts.stdout).Encode(info)
	}
	rev := info.Revision
	if rev == "" {
		rev = "unknown"
	}
	fmt.Fprintf(opts.stdout, "orkpipe %s\nrevision %s (dirty: %t)\nbinary   %s\n         %s\n%s %s\n",
		info.Version, rev, info.Dirty, info.Path, info.Digest, info.GoVersion, info.Platform)
	return nil
}
