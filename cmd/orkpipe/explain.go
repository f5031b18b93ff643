package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"orkpipe/pipelines"
	"orkpipe/pipelines/engine"
)

func newExplainCommand(opts *globalOptions) *cobra.Command {
	var sets []string
	cmd := &cobra.Command{
		Use:   "explain TARGET|RECIPE",
		Short: "Say why each node of the last build of a target ran: which part of its key material changed",
		Long: "explain compares the key material of every node that ran in the last build of TARGET with the\n" +
			"previous build of the same target: parameter X old -> new, input Y's digest, stage version, tool digest.\n" +
			"It also reports nodes with identical key material (configurations meant to differ that do not).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExplain(cmd.Context(), opts, args[0], sets)
		},
	}
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a recipe key by its dotted path (key.sub=value); repeatable")
	return cmd
}

func runExplain(ctx context.Context, opts *globalOptions, arg string, sets []string) error {
	mem, err := opts.memBudget()
	if err != nil {
		return err
	}
	t, err := pipelines.Resolve(arg, mem, sets)
	if err != nil {
		return asUsage(err)
	}
	dir, err := opts.cache()
	if err != nil {
		return err
	}
	x, err := engine.Explain(ctx, engine.HistoryDir(dir), t.Name())
	if errors.Is(err, engine.ErrNoHistory) {
		return asUsage(err)
	}
	if err != nil {
		return err
	}
	if opts.json {
		return json.NewEncoder(opts.stdout).Encode(x)
	}
	w := opts.stdout
	prev := "none recorded"
	if x.Previous != nil {
		prev = x.Previous.Local().Format(time.DateTime)
	}
	fmt.Fprintf(w, "%s: last build %s, previous %s\n", x.Target, x.Build.Local().Format(time.DateTime), prev)
	fmt.Fprintf(w, "%d nodes ran, %d cached", x.Ran, x.Cached)
	if len(x.NotComputed) > 0 {
		fmt.Fprintf(w, ", %d not reached (%s)", len(x.NotComputed), strings.Join(x.NotComputed, ", "))
	}
	fmt.Fprintln(w)
	for _, n := range x.Nodes {
		fmt.Fprintf(w, "%s (%s) %s: %s\n", n.Node, n.Stage, n.Outcome, n.Reason)
		for _, c := range n.Changes {
			old, cur := c.Old, c.New
			if old == "" {
				old = "(absent)"
			}
			if cur == "" {
				cur = "(absent)"
			}
			fmt.Fprintf(w, "    %s: %s -> %s\n", c.Field, old, cur)
		}
	}
	for _, ids := range x.Identical {
		fmt.Fprintf(w, "warning: identical key material for %s: they ran once and share outputs; if they are meant to differ, their parameters or inputs are not reaching the key\n", strings.Join(ids, ", "))
	}
	return nil
}
