package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"orkpipe/artifacts"
	"orkpipe/pipelines/nodeexec"
)

// nodeExecFlags are the flags of `orkpipe node exec`.
type nodeExecFlags struct {
	key      string
	material string
	inputs   string
	output   string
	scratch  string
	verify   bool
}

// newNodeCommand is `orkpipe node`, hidden from the main help: the entry point executors use to
// run one node (in a Dagger container, or by hand to reproduce a node).
func newNodeCommand(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "node",
		Short:  "Run single build nodes (used by executors such as Dagger)",
		Hidden: true,
	}
	var f nodeExecFlags
	exec := &cobra.Command{
		Use:   "exec --key KEY --material FILE --inputs DIR --output DIR",
		Short: "Run one node from its key material and its inputs named by digest",
		Long: "exec runs the node described by the key material in FILE (canonical JSON, as `orkpipe explain` shows\n" +
			"it). Every input and tool is read from DIR/<hex of its digest>. The outputs are written to\n" +
			"OUTPUT/outputs/<name> and the result record (outputs with digests and sizes, host, binary) to\n" +
			"OUTPUT/result.json, last. An input may also come as DIR/<hex>/<hex>.tar, its tar form (only its data,\n" +
			"as the Dagger executor sends a file with holes): it is unpacked, holes kept, under --scratch and\n" +
			"removed when the node ends. The local executor runs nodes through the same code.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runNodeExec(cmd.Context(), opts, f)
		},
	}
	exec.Flags().StringVar(&f.key, "key", "", "node key (blake3:<hex>); the key material must hash to it (required)")
	exec.Flags().StringVar(&f.material, "material", "", "file holding the node's key material JSON (required)")
	exec.Flags().StringVar(&f.inputs, "inputs", "", "directory of input and tool files named by the hex of their digest (required)")
	exec.Flags().StringVarP(&f.output, "output", "o", "", "output directory, absent or empty (required)")
	exec.Flags().StringVar(&f.scratch, "scratch", os.TempDir(), "directory under which inputs in tar form are unpacked (created if absent)")
	exec.Flags().BoolVar(&f.verify, "verify-inputs", true, "re-hash every input file and refuse one that does not match its name")
	cmd.AddCommand(exec)
	return cmd
}

func runNodeExec(ctx context.Context, opts *globalOptions, f nodeExecFlags) error {
	for flag, v := range map[string]string{"--key": f.key, "--material": f.material, "--inputs": f.inputs, "--output": f.output} {
		if v == "" {
			return usagef("%s is required", flag)
		}
	}
	key, err := artifacts.ParseDigest(f.key)
	if err != nil {
		return usagef("--key: %v", err)
	}
	material, err := os.ReadFile(f.material)
	if err != nil {
		return usagef("--material: %v", err)
	}
	res, err := nodeexec.Run(ctx, material, f.inputs, f.output,
		nodeexec.WithKey(key), nodeexec.WithVerifyInputs(f.verify), nodeexec.WithScratch(f.scratch), nodeexec.WithLogger(opts.logger),
		// One node in this process: collect under its declared memory unless GOMEMLIMIT says otherwise.
		nodeexec.WithMemoryLimit(os.Getenv("GOMEMLIMIT") == ""))
	if err != nil {
		return fmt.Errorf("node %s (material %s): %w", key, f.material, err)
	}
	if opts.json {
		return json.NewEncoder(opts.stdout).Encode(res)
	}
	for _, o := range res.Outputs {
		fmt.Fprintf(opts.stdout, "%s\t%s\t%d\n", o.Name, o.Digest, o.Size)
	}
	return nil
}
