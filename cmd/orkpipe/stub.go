package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/spf13/cobra"

	"orkpipe/ork/gguf"
)

// stubFlags are the flags of `stub` and `stub verify`.
type stubFlags struct {
	pack      string // --pack PACK: the owned set is the pack's entries
	own       string // --own REGEX: the owned set, matched against tensor names
	out       string // -o
	force     bool   // --force: replace an existing -o
	source    string // --source SRC.gguf (verify)
	allowZero string // --allow-zero REGEX (verify)
}

func newStubCommand(opts *globalOptions) *cobra.Command {
	var fl stubFlags
	cmd := &cobra.Command{
		Use:   "stub SOURCE.gguf (--pack PACK | --own REGEX) -o STUB.gguf",
		Short: "Emit a stub GGUF: the source's header and non-owned tensors, owned tensors left as holes",
		Long: "stub writes a copy of SOURCE.gguf whose header, KV and tensor infos are byte-identical, whose\n" +
			"tensors the pack owns (--pack, or --own) are left as file holes (the pack supplies them), at the source's full length.\n" +
			"An existing output is never overwritten without --force (one that already holds exactly this stub is left as it is).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStub(cmd.Context(), opts, args[0], fl)
		},
	}
	cmd.Flags().StringVar(&fl.pack, "pack", "", "orkpack whose entries are the owned tensors")
	cmd.Flags().StringVar(&fl.own, "own", "", "regular expression selecting the owned tensors by name")
	cmd.Flags().StringVarP(&fl.out, "output", "o", "", "stub file to write (required)")
	cmd.Flags().BoolVar(&fl.force, "force", false, "replace an existing output file")
	cmd.AddCommand(newStubVerifyCommand(opts))
	return cmd
}

func newStubVerifyCommand(opts *globalOptions) *cobra.Command {
	var fl stubFlags
	cmd := &cobra.Command{
		Use:   "verify STUB.gguf (--pack PACK | --own REGEX) [--source SRC.gguf]",
		Short: "Verify a stub: owned tensors are holes/zero, no other tensor is all zero, header matches the source",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStubVerify(cmd.Context(), opts, args[0], fl)
		},
	}
	cmd.Flags().StringVar(&fl.pack, "pack", "", "orkpack whose entries are the owned tensors")
	cmd.Flags().StringVar(&fl.own, "own", "", "regular expression selecting the owned tensors by name")
	cmd.Flags().StringVar(&fl.source, "source", "", "source GGUF whose header region the stub must match")
	cmd.Flags().StringVar(&fl.allowZero, "allow-zero", "", "regular expression of non-owned tensors allowed to be all zero")
	return cmd
}

// ownedSet returns the set of tensors of f that the pack owns. It is the one place the owned
// set is decided (--own today; the lead adds --pack).
func ownedSet(ctx context.Context, f *gguf.File, fl stubFlags) (gguf.NameSet, error) {
	switch {
	case fl.pack != "" && fl.own != "":
		return nil, usagef("give either --pack or --own, not both")
	case fl.pack != "":
		return packOwnedSet(ctx, f, fl.pack, fl.out != "") // emitting: f is the source model
	case fl.own == "":
		return nil, usagef("--pack PACK or --own REGEX is required (the tensors the pack owns)")
	}
	re, err := regexp.Compile(fl.own)
	if err != nil {
		return nil, usagef("--own: %v", err)
	}
	return gguf.MatchTensors(f, re)
}

func runStub(ctx context.Context, opts *globalOptions, source string, fl stubFlags) error {
	if fl.out == "" {
		return usagef("-o STUB.gguf is required")
	}
	src, err := gguf.Open(ctx, source)
	if err != nil {
		return err
	}
	defer src.Close()
	owned, err := ownedSet(ctx, src, fl)
	if err != nil {
		return err
	}
	var so []gguf.StubOption
	if fl.force {
		so = append(so, gguf.WithReplace())
	}
	res, err := gguf.EmitStub(ctx, src, owned, fl.out, so...)
	if err != nil {
		return err
	}
	hd := "blake3:" + hex.EncodeToString(res.HeaderDigest[:])
	if opts.json {
		return json.NewEncoder(opts.stdout).Encode(map[string]any{
			"stub": res.Path, "source": source, "size": res.Size, "owned": res.Owned,
			"owned_bytes": res.OwnedBytes, "copied_bytes": res.CopiedBytes, "header_digest": hd, "unchanged": res.Unchanged,
		})
	}
	verb := "wrote"
	if res.Unchanged {
		verb = "unchanged (it already held this stub)"
	}
	fmt.Fprintf(opts.stdout, "%s %s: %d bytes, %d owned tensors (%d bytes) left as holes, %d bytes copied\nheader digest %s\n",
		verb, res.Path, res.Size, len(res.Owned), res.OwnedBytes, res.CopiedBytes, hd)
	return nil
}

func runStubVerify(ctx context.Context, opts *globalOptions, stub string, fl stubFlags) error {
	var allowRE *regexp.Regexp
	if fl.allowZero != "" {
		re, err := regexp.Compile(fl.allowZero)
		if err != nil {
			return usagef("--allow-zero: %v", err)
		}
		allowRE = re
	}
	var vo []gguf.VerifyOption
	if fl.source != "" {
		src, err := gguf.Open(ctx, fl.source)
		if err != nil {
			return err
		}
		d, err := src.HeaderDigest(ctx)
		src.Close()
		if err != nil {
			return err
		}
		vo = append(vo, gguf.WithSourceHeaderDigest(d))
	}
	sf, err := gguf.Open(ctx, stub)
	if err != nil {
		return fmt.Errorf("%w: %w", gguf.ErrStub, err)
	}
	owned, err := ownedSet(ctx, sf, fl)
	if allowRE != nil {
		for _, t := range sf.Tensors {
			if allowRE.MatchString(t.Name) {
				vo = append(vo, gguf.WithAllowZero(t.Name))
			}
		}
	}
	sf.Close()
	if err != nil {
		return err
	}
	rep, verr := gguf.VerifyStub(ctx, stub, owned, vo...)
	if opts.json {
		problems := make([]map[string]string, 0, len(rep.Problems))
		for _, p := range rep.Problems {
			problems = append(problems, map[string]string{"tensor": p.Tensor, "reason": p.Reason})
		}
		out := map[string]any{"stub": stub, "ok": verr == nil, "tensors": rep.Tensors, "owned": rep.Owned,
			"data_bytes_read": rep.DataBytesRead, "header_digest": "blake3:" + hex.EncodeToString(rep.HeaderDigest[:]),
			"problems": problems}
		if verr != nil {
			out["error"] = verr.Error()
		}
		if err := json.NewEncoder(opts.stdout).Encode(out); err != nil {
			return err
		}
		return verr
	}
	if verr != nil {
		return verr
	}
	fmt.Fprintf(opts.stdout, "%s: stub OK: %d tensors, %d owned and zero, every other tensor non-zero; header digest blake3:%s\n",
		stub, rep.Tensors, rep.Owned, hex.EncodeToString(rep.HeaderDigest[:]))
	return nil
}
