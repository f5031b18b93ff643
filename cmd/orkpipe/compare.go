package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"orkpipe/ork/boardhost"
)

func newCompareCommand(opts *globalOptions) *cobra.Command {
	var crossMachine bool
	cmd := &cobra.Command{
		Use:   "compare REPORT_A REPORT_B",
		Short: "Compare the scores of two board verify reports (same machine, binary and text only)",
		Long: "compare prints the relative difference (B-A)/A of the perplexity and KL-divergence scores of two\n" +
			"verify reports. It refuses (exit 1) unless both passed verification and their machine fingerprint,\n" +
			"run-program digest, text digest, run command template and chunk count match, and names every\n" +
			"part that differs:\n" +
			"a 4-bit perplexity is only meaningful against a baseline from the same machine and binary.\n" +
			"--cross-machine prints the numbers anyway, labelled NOT COMPARABLE.",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usagef("compare: want 2 report files (REPORT_A REPORT_B), got %d", len(args))
			}
			return runCompare(cmd.Context(), opts, args[0], args[1], crossMachine)
		},
	}
	cmd.Flags().BoolVar(&crossMachine, "cross-machine", false, "print the numbers of non-comparable reports, labelled as not comparable")
	return cmd
}

func runCompare(_ context.Context, opts *globalOptions, pathA, pathB string, crossMachine bool) error {
	a, err := boardhost.ReadReport(pathA)
	if err != nil {
		return err
	}
	b, err := boardhost.ReadReport(pathB)
	if err != nil {
		return err
	}
	c, cerr := boardhost.Compare(a, b, crossMachine)
	if c == nil {
		return cerr
	}
	refused := errors.Is(cerr, boardhost.ErrNotComparable)
	if opts.json {
		if err := json.NewEncoder(opts.stdout).Encode(c); err != nil {
			return err
		}
	} else if !refused {
		if err := writeComparison(opts.stdout, c, pathA, pathB); err != nil {
			return err
		}
	}
	if refused {
		var lines strings.Builder
		for _, m := range c.Mismatches {
			fmt.Fprintf(&lines, "\n  %s", m)
		}
		return fmt.Errorf("%s and %s are not comparable; they differ in:%s\n(--cross-machine prints the numbers anyway, labelled as not comparable)", pathA, pathB, lines.String())
	}
	return cerr
}

func writeComparison(w io.Writer, c *boardhost.Comparison, pathA, pathB string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "A  %s\nB  %s\n", pathA, pathB)
	switch {
	case c.Comparable:
		fmt.Fprintf(&b, "comparable: same machine fingerprint %s, run program %s, text %s\n", c.Fingerprint[0], c.Program[0], c.Text[0])
	default:
		fmt.Fprintf(&b, "NOT COMPARABLE: the reports differ in %d parts:\n", len(c.Mismatches))
		for _, m := range c.Mismatches {
			fmt.Fprintf(&b, "  %s\n", m)
		}
	}
	if len(c.Metrics) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		header, label := "", ""
		if !c.Comparable {
			header, label = "\t", "\tNOT COMPARABLE"
		}
		fmt.Fprintf(tw, "metric\tA\tB\t(B-A)/A%s\t\n", header)
		for _, m := range c.Metrics {
			rel := "n/a"
			if m.RelDiff != nil {
				rel = fmt.Sprintf("%+.3f%%", 100**m.RelDiff)
			}
			fmt.Fprintf(tw, "%s\t%.6g\t%.6g\t%s%s\t\n", m.Name, m.A, m.B, rel, label)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
