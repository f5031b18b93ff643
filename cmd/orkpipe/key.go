package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"orkpipe/registry"
)

func newKeyCommand(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Manage ed25519 signing keys for pack provenance",
	}
	var out string
	gen := &cobra.Command{
		Use:   "generate -o KEYFILE",
		Short: "Create KEYFILE (private, mode 0600) and KEYFILE.pub; never overwrites",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runKeyGenerate(opts, out)
		},
	}
	gen.Flags().StringVarP(&out, "output", "o", "", "private key file to create (required)")
	cmd.AddCommand(gen)
	return cmd
}

func runKeyGenerate(opts *globalOptions, out string) error {
	if out == "" {
		return usagef("-o KEYFILE is required")
	}
	pub, err := registry.GenerateKeyFiles(out)
	if err != nil {
		return err
	}
	if opts.json {
		return json.NewEncoder(opts.stdout).Encode(map[string]string{"private": out, "public": out + ".pub", "keyid": registry.KeyID(pub)})
	}
	fmt.Fprintf(opts.stdout, "private key %s (0600)\npublic key  %s.pub\nkey id      %s\n", out, out, registry.KeyID(pub))
	return nil
}
