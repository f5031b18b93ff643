package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"orkpipe/internal/buildinfo"
	"orkpipe/ork/quant"
	"orkpipe/stages"
)

func newVersionCommand(opts *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print orkpipe's version, VCS revision, dirty flag, the digest of this binary and its BLAS",
		Args:  noArgs,
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
	blasLine := quant.BLASBackend + " (pure Go)"
	if core := quant.OpenBLASCore(); core != "" {
		blasLine = fmt.Sprintf("%s, %s kernels", quant.BLASBackend, core)
	}
	numerics, err := stages.Numerics()
	if err != nil {
		return err
	}
	if opts.json {
		return json.NewEncoder(opts.stdout).Encode(struct {
			buildinfo.Info
			BLAS         string `json:"blas"`
			OpenBLASCore string `json:"openblas_core,omitempty"`
			Numerics     string `json:"numerics"`
		}{info, quant.BLASBackend, quant.OpenBLASCore(), numerics})
	}
	numLine := "pure Go (the same bits on every CPU)"
	if numerics != "" {
		numLine = numerics + " (in every node key)"
	}
	rev := info.Revision
	if rev == "" {
		rev = "unknown"
	}
	fmt.Fprintf(opts.stdout, "orkpipe %s\nrevision %s (dirty: %t)\nbinary   %s\n         %s\n%s %s\nblas     %s\nnumerics %s\n",
		info.Version, rev, info.Dirty, info.Path, info.Digest, info.GoVersion, info.Platform, blasLine, numLine)
	return nil
}
