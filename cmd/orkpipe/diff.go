package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"orkpipe/ork/pack"
	"orkpipe/stages/reporthtml"
)

func newDiffCommand(opts *globalOptions) *cobra.Command {
	var html bool
	var f pageFlags
	cmd := &cobra.Command{
		Use:   "diff PACK_A PACK_B | diff --html A B",
		Short: "Show the entries that differ between two orkpacks, and how; --html: two builds side by side",
		Long: "diff compares two packs' indexes (both are validated on open): entries only in one, and for entries in\n" +
			"both every field that differs (dtype, shape, group, nibble order, rotation, activation bits and clip, sizes,\n" +
			"resident bytes, domain, qerr, source digest, data digest). It exits 0 whether or not they differ.\n\n" +
			"With --html it draws two builds side by side from their report.json files (A and B: a build directory, its\n" +
			"report.json, its pack, or an artifact REF whose report.json alone is pulled): sizes, the screens (perplexity,\n" +
			"KL divergence distributions), a heatmap of the qerr deltas B - A per layer and weight with the largest\n" +
			"changes, both domain plans and the provenance of each. The page goes to standard output or -o FILE.",
		Args: func(cmd *cobra.Command, args []string) error { return asUsage(cobra.ExactArgs(2)(cmd, args)) },
		RunE: func(cmd *cobra.Command, args []string) error {
			if html {
				return runDiffHTML(cmd.Context(), opts, &f, args[0], args[1])
			}
			if f.out != "" || f.force || len(f.trust) > 0 || f.plainHTTP || f.insecure {
				return usagef("-o, --force, --trust, --plain-http and --insecure apply to diff --html")
			}
			return runDiff(cmd.Context(), opts, args[0], args[1])
		},
	}
	cmd.Flags().BoolVar(&html, "html", false, "draw the two builds' reports side by side as one HTML page")
	f.register(cmd)
	return cmd
}

func runDiffHTML(ctx context.Context, opts *globalOptions, f *pageFlags, a, b string) error {
	ra, fromA, err := readReportJSON(ctx, opts, f, a)
	if err != nil {
		//lint:ignore ST1005 A names the first report, as the usage does
		return fmt.Errorf("A: %w", err)
	}
	rb, fromB, err := readReportJSON(ctx, opts, f, b)
	if err != nil {
		//lint:ignore ST1005 B names the second report, as the usage does
		return fmt.Errorf("B: %w", err)
	}
	page, err := reporthtml.RenderDiff(ra, rb, fromA, fromB)
	if err != nil {
		return err
	}
	return writePage(opts, f, page)
}

type diffField struct {
	Field string `json:"field"`
	A     any    `json:"a"`
	B     any    `json:"b"`
}

type diffEntry struct {
	Name    string      `json:"name"`
	Changes []diffField `json:"changes"`
}

type diffJSON struct {
	A         string      `json:"a"`
	B         string      `json:"b"`
	Pack      []diffField `json:"pack"`
	OnlyA     []string    `json:"only_a"`
	OnlyB     []string    `json:"only_b"`
	Changed   []diffEntry `json:"changed"`
	Identical int         `json:"identical"`
}

func runDiff(ctx context.Context, opts *globalOptions, pathA, pathB string) error {
	a, err := pack.Open(ctx, pathA)
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := pack.Open(ctx, pathB)
	if err != nil {
		return err
	}
	defer b.Close()
	d := diffPacks(a, b)
	d.A, d.B = pathA, pathB
	if opts.json {
		return json.NewEncoder(opts.stdout).Encode(d)
	}
	w := opts.stdout
	for _, f := range d.Pack {
		fmt.Fprintf(w, "pack %s: %v -> %v\n", f.Field, f.A, f.B)
	}
	for _, n := range d.OnlyA {
		fmt.Fprintf(w, "- %s (only in %s)\n", shown(n), pathA)
	}
	for _, n := range d.OnlyB {
		fmt.Fprintf(w, "+ %s (only in %s)\n", shown(n), pathB)
	}
	for _, c := range d.Changed {
		fmt.Fprintf(w, "~ %s:", shown(c.Name))
		for i, f := range c.Changes {
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(w, "%s %s %v -> %v", sep, f.Field, f.A, f.B)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%d only in A, %d only in B, %d changed, %d identical\n", len(d.OnlyA), len(d.OnlyB), len(d.Changed), d.Identical)
	return nil
}

func diffPacks(a, b *pack.Reader) diffJSON {
	d := diffJSON{OnlyA: []string{}, OnlyB: []string{}, Changed: []diffEntry{}, Pack: []diffField{}}
	ab, bb := a.Board(), b.Board()
	for _, f := range []diffField{
		{"version", a.Version(), b.Version()}, {"board", ab.Name, bb.Name}, {"profile", ab.Profile.String(), bb.Profile.String()},
		{"domains", ab.Domains, bb.Domains}, {"resident_bytes", ab.Resident, bb.Resident}, {"bytes", a.Size(), b.Size()},
	} {
		if f.A != f.B {
			d.Pack = append(d.Pack, f)
		}
	}
	for _, ea := range a.Entries() {
		eb, err := b.Entry(ea.Name)
		if err != nil {
			d.OnlyA = append(d.OnlyA, ea.Name)
			continue
		}
		if ch := entryChanges(ea, eb); len(ch) > 0 {
			d.Changed = append(d.Changed, diffEntry{Name: ea.Name, Changes: ch})
		} else {
			d.Identical++
		}
	}
	for _, eb := range b.Entries() {
		if _, err := a.Entry(eb.Name); err != nil {
			d.OnlyB = append(d.OnlyB, eb.Name)
		}
	}
	return d
}

func entryChanges(a, b pack.Entry) []diffField {
	var out []diffField
	for _, f := range []diffField{
		{"dtype", a.DType.String(), b.DType.String()},
		{"k", a.K, b.K}, {"n", a.N, b.N}, {"group", a.Group, b.Group},
		{"nibbles", a.Nibbles.String(), b.Nibbles.String()},
		{"rotation", a.Rotation.String(), b.Rotation.String()},
		{"act_bits", a.ActBits, b.ActBits}, {"act_clip", a.ActClip, b.ActClip}, {"segment_k", a.SegmentK, b.SegmentK},
		{"bytes", a.Length, b.Length}, {"resident_bytes", a.ResidentBytes, b.ResidentBytes},
		{"domain", a.Domain, b.Domain}, {"qerr", a.QErr, b.QErr},
		{"source", a.Source.String(), b.Source.String()}, {"data", a.Digest.String(), b.Digest.String()},
	} {
		if f.A != f.B {
			out = append(out, f)
		}
	}
	return out
}
