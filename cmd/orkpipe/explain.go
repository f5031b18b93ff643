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
	"orkpipe/pipelines/dagview"
	"orkpipe/pipelines/engine"
)

func newExplainCommand(opts *globalOptions) *cobra.Command {
	var sets []string
	var g graphFlags
	cmd := &cobra.Command{
		Use:   "explain TARGET|RECIPE",
		Short: "Say why each node of the last build of a target ran: which part of its key material changed",
		Long: "explain compares the key material of every node that ran in the last build of TARGET with the\n" +
			"previous build of the same target: parameter X old -> new, input Y's digest, stage version, tool digest.\n" +
			"It also reports nodes with identical key material (configurations meant to differ that do not).\n\n" +
			"--format dot or mermaid draws the target's graph coloured by what each node did in the last build (orange:\n" +
			"executed, red: failed, grey: cached, white: not reached or not in that build), each node that ran labelled\n" +
			"with the first change of its key material; boxes group nodes as for plan (--group=false: every node).",
		Args: func(cmd *cobra.Command, args []string) error { return asUsage(cobra.ExactArgs(1)(cmd, args)) },
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExplain(cmd.Context(), opts, args[0], sets, g)
		},
	}
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a recipe key by its dotted path (key.sub=value); repeatable")
	g.register(cmd)
	return cmd
}

func runExplain(ctx context.Context, opts *globalOptions, arg string, sets []string, gf graphFlags) error {
	drawing, err := gf.check(opts)
	if err != nil {
		return err
	}
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
	if drawing {
		return drawExplanation(ctx, opts, gf, t, x)
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

// drawExplanation draws the target's planned graph coloured by the outcomes of its last recorded
// build (engine.History), each node that ran noted with the first change of its key material.
func drawExplanation(ctx context.Context, opts *globalOptions, gf graphFlags, t engine.Target, x *engine.Explanation) error {
	s, err := openEngine(ctx, opts, engineSetup{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	g, err := t.Graph(ctx)
	if err != nil {
		return asUsage(err)
	}
	plan, err := s.engine.Plan(g)
	if err != nil {
		return asUsage(err)
	}
	status, err := s.engine.Status(ctx, plan)
	if err != nil {
		return err
	}
	dir, err := opts.cache()
	if err != nil {
		return err
	}
	recs, err := engine.History(ctx, engine.HistoryDir(dir), t.Name(), 1)
	if err != nil {
		return err
	}
	outcome := map[string]string{}
	for _, n := range recs[0].Nodes {
		outcome[n.ID] = n.Outcome
	}
	note := map[string]string{}
	for _, n := range x.Nodes {
		note[n.Node] = n.Reason
		if len(n.Changes) > 0 {
			c := n.Changes[0]
			note[n.Node] = fmt.Sprintf("%s: %s -> %s", c.Field, shortValue(c.Old), shortValue(c.New))
			if len(n.Changes) > 1 {
				note[n.Node] += fmt.Sprintf(" (+%d)", len(n.Changes)-1)
			}
		}
	}
	nodes := viewNodes(status)
	for i := range nodes {
		nodes[i].State, nodes[i].Note = outcome[nodes[i].ID], note[nodes[i].ID]
	}
	return gf.draw(opts, nodes, dagview.Options{Title: fmt.Sprintf("%s, last build %s", t.Name(), x.Build.Local().Format(time.DateTime)), Explain: true})
}

// shortValue abbreviates a key-material value for a graph label (digests to 12 hex digits).
func shortValue(v string) string {
	if v == "" {
		return "(absent)"
	}
	if alg, hex, ok := strings.Cut(v, ":"); ok && alg == "blake3" && len(hex) > 12 {
		return hex[:12]
	}
	if len(v) > 40 {
		return v[:37] + "..."
	}
	return v
}
