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
		Use:   "generate KEYFILE | generate -o KEYFILE",
		Short: "Create KEYFILE (private, mode 0600) and KEYFILE.pub; never overwrites",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 1 && out != "":
				return usagef("key generate: give KEYFILE once, as an argument or with -o (got %q and -o %q)", args[0], out)
			case len(args) == 1:
				out = args[0]
			}
			return runKeyGenerate(opts, out)
		},
	}
	gen.Flags().StringVarP(&out, "output", "o", "", "private key file to create (or give it as the argument)")
	cmd.AddCommand(gen)
	return cmd
}

func runKeyGenerate(opts *globalOptions, out string) error {
	if out == "" {
		return usagef("key generate: name the private key file to create: orkpipe key generate KEYFILE")
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
