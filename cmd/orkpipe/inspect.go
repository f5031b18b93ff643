package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"orkpipe/ork/gguf"
)

func newInspectCommand(opts *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect FILE",
		Short: "Describe a GGUF file (header, KV, tensors) or an orkpack (entries, sizes, domains, qerr)",
		Long: "inspect reads a GGUF model or stub, or an orkpack, and prints what it holds. The kind is decided\n" +
			"by the file's magic bytes, not its name. With --json the output is one JSON document (see docs/cli.md).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runInspect(cmd.Context(), opts, args[0])
		},
	}
}

// packMagic is the first eight bytes of an orkpack (docs/orkpack.md).
var packMagic = []byte("ORKPACK\x00")

func runInspect(ctx context.Context, opts *globalOptions, path string) error {
	// A named pipe or a device is refused before the open, which for a pipe would block until a writer
	// comes; both formats are read at offsets.
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("inspect %s: not a regular file: a GGUF file or an orkpack is read at offsets", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	head := make([]byte, 8)
	n, err := io.ReadFull(f, head)
	f.Close()
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return fmt.Errorf("inspect %s: %w", path, err)
	}
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte(gguf.Magic)):
		return runInspectGGUF(ctx, opts, path)
	case bytes.HasPrefix(head, packMagic):
		return runInspectPack(ctx, opts, path)
	default:
		return fmt.Errorf("inspect %s: not a GGUF file (magic %q) nor an orkpack (magic %q): first bytes are %q",
			path, gguf.Magic, packMagic, head)
	}
}
