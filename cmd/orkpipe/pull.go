package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"orkpipe/internal/units"
	"orkpipe/registry"
)

type pullFlags struct {
	transportFlags
	out          string
	trust        []string
	force        bool
	noSpaceCheck bool
}

func newPullCommand(opts *globalOptions) *cobra.Command {
	var f pullFlags
	cmd := &cobra.Command{
		Use:   "pull REF -o DIR",
		Short: "Pull and verify a pack artifact from an OCI registry into DIR",
		Long: `pull downloads the artifact at REF (pushed by orkpipe push, see docs/oci.md) into DIR. The ranges
of every file download in parallel, each checked against its BLAKE3 value as it streams and
written in place (a sparse file's holes stay holes); a file whose ranges all verified (so its
BLAKE3 is the manifest's; its sha256 follows, see docs/oci.md) is renamed, read-only, into DIR. An
interrupted pull resumes from the ranges it had verified (DIR/.orkpipe-partial/<manifest hex>);
a pull that finishes removes its own state and warns of other artifacts' state left there (its
size, and how to resume or remove it; leftoverPartials in --json). A file already
in DIR is kept only if its BLAKE3 matches. With --trust KEY.pub the artifact must carry
provenance signed by that key. A pull whose files still to write (their data: holes, files in
place and ranges an interrupted pull verified need nothing) exceed the free space of DIR's
filesystem is refused before anything is downloaded (--no-space-check).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPull(cmd.Context(), opts, &f, args[0])
		},
	}
	f.register(cmd)
	cmd.Flags().StringVarP(&f.out, "output", "o", "", "destination directory (required)")
	cmd.Flags().StringArrayVar(&f.trust, "trust", nil, "ed25519 public key file; refuse artifacts without provenance signed by one of these keys (repeatable)")
	cmd.Flags().BoolVar(&f.force, "force", false, "replace destination files whose content differs from the artifact")
	cmd.Flags().BoolVar(&f.noSpaceCheck, "no-space-check", false, "start even when the files still to write need more than DIR's filesystem has free")
	return cmd
}

// trustOptions loads --trust key files.
func trustOptions(paths []string) ([]registry.Option, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	var keys [][]byte
	for _, p := range paths {
		k, err := registry.LoadPublicKey(p)
		if err != nil {
			return nil, usagef("--trust: %v", err)
		}
		keys = append(keys, k)
	}
	var opts []registry.Option
	for _, k := range keys {
		opts = append(opts, registry.WithTrust(k))
	}
	return opts, nil
}

func runPull(ctx context.Context, opts *globalOptions, f *pullFlags, ref string) error {
	if f.out == "" {
		return usagef("-o DIR is required")
	}
	ropts, err := f.options(ref)
	if err != nil {
		return err
	}
	tr, err := trustOptions(f.trust)
	if err != nil {
		return err
	}
	ropts = append(ropts, tr...)
	ropts = append(ropts, registry.WithJobs(opts.jobs), registry.WithLogger(opts.logger))
	if f.force {
		ropts = append(ropts, registry.WithForce())
	}
	if f.noSpaceCheck {
		ropts = append(ropts, registry.WithoutSpaceCheck())
	}
	prog := newTransferProgress(opts, "pull")
	ropts = append(ropts, registry.WithProgress(prog))
	res, err := registry.Pull(ctx, ref, f.out, ropts...)
	prog.wait()
	if err != nil {
		return err
	}
	if opts.json {
		type file struct {
			Name    string `json:"name"`
			Path    string `json:"path"`
			Size    int64  `json:"size"`
			SHA256  string `json:"sha256"`
			BLAKE3  string `json:"blake3"`
			Skipped bool   `json:"skipped"`
			Resumed int    `json:"resumedRanges"`
		}
		type leftover struct {
			Dir    string `json:"dir"`
			Digest string `json:"digest"`
			Bytes  int64  `json:"bytes"`
		}
		out := struct {
			Digest     string     `json:"digest"`
			Ref        string     `json:"ref"`
			Downloaded int64      `json:"downloaded"`
			Files      []file     `json:"files"`
			TrustedBy  []string   `json:"trustedBy,omitempty"`
			Leftovers  []leftover `json:"leftoverPartials,omitempty"` // other artifacts' interrupted pull state
		}{Digest: res.Digest.String(), Ref: ref, Downloaded: res.Downloaded}
		for _, l := range res.Leftovers {
			out.Leftovers = append(out.Leftovers, leftover{l.Dir, l.Digest.String(), l.Bytes})
		}
		for i, pf := range res.Files {
			fd := res.Artifact.Files[i].Digests
			out.Files = append(out.Files, file{pf.Name, pf.Path, fd.Size, fd.SHA256, fd.BLAKE3.String(), pf.Skipped, pf.Resumed})
		}
		for _, a := range res.Attestations {
			out.TrustedBy = append(out.TrustedBy, a.TrustedBy...)
		}
		return json.NewEncoder(opts.stdout).Encode(out)
	}
	for i, pf := range res.Files {
		state := "verified (BLAKE3 of every range and of the file)"
		if pf.Skipped {
			state = "present, verified (its BLAKE3 recomputed)"
		} else if pf.Resumed > 0 {
			state += fmt.Sprintf(", %d ranges resumed", pf.Resumed)
		}
		fmt.Fprintf(opts.stdout, "%-28s %10s  %s\n", pf.Path, units.FormatSize(res.Artifact.Files[i].Digests.Size), state)
	}
	for _, a := range res.Attestations {
		fmt.Fprintf(opts.stdout, "provenance %s signed by %v\n", a.Digest, a.TrustedBy)
	}
	fmt.Fprintf(opts.stdout, "downloaded %s\n%s\n", units.FormatSize(res.Downloaded), res.Digest)
	return nil
}
