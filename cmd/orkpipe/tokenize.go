package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
)

func newTokenizeCommand(opts *globalOptions) *cobra.Command {
	var noBOS, parseSpecial bool
	cmd := &cobra.Command{
		Use:   "tokenize MODEL.gguf TEXT",
		Short: "Tokenize a text file (or - for standard input) whole with the model's tokenizer; print the ids",
		Long: "tokenize reads TEXT (a file, or - for standard input) whole and tokenizes it with the tokenizer\n" +
			"described by MODEL's tokenizer.ggml.* metadata, exactly as llama.cpp's llama_tokenize does. The ids are\n" +
			"printed on one line, separated by spaces (--json: a JSON array). BOS/EOS are added as the vocabulary\n" +
			"asks unless --no-bos; special tokens written in the text are not parsed unless --parse-special.",
		Args: func(cmd *cobra.Command, args []string) error { return asUsage(cobra.ExactArgs(2)(cmd, args)) },
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTokenize(cmd.Context(), opts, args[0], args[1], !noBOS, parseSpecial)
		},
	}
	cmd.Flags().BoolVar(&noBOS, "no-bos", false, "do not add BOS/EOS (the special tokens the vocabulary adds)")
	cmd.Flags().BoolVar(&parseSpecial, "parse-special", false, "recognise control tokens written in the text")
	return cmd
}

func runTokenize(ctx context.Context, opts *globalOptions, modelPath, textPath string, addSpecial, parseSpecial bool) error {
	text, err := readText(textPath)
	if err != nil {
		return err
	}
	f, err := gguf.Open(ctx, modelPath)
	if err != nil {
		return err
	}
	defer f.Close()
	tok, err := model.TokenizerFromGGUF(f)
	if err != nil {
		return err
	}
	ids, err := tok.Encode(text, addSpecial, parseSpecial)
	if err != nil {
		return fmt.Errorf("tokenize %s: %w", textPath, err)
	}
	w := bufio.NewWriter(opts.stdout)
	if opts.json {
		w.WriteByte('[')
	}
	for i, id := range ids {
		if i > 0 {
			if opts.json {
				w.WriteByte(',')
			} else {
				w.WriteByte(' ')
			}
		}
		w.WriteString(strconv.Itoa(int(id)))
	}
	if opts.json {
		w.WriteByte(']')
	}
	w.WriteByte('\n')
	return w.Flush()
}

// readText reads a whole text file, or standard input for "-".
func readText(path string) (string, error) {
	if path == "-" {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return "", fmt.Errorf("read standard input: %w", err)
		}
		return string(b), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return string(b), nil
}
