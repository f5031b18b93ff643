package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"orkpipe/internal/startheap"
)

// TestStartHeapCommands: every command internal/startheap gives the heap advice to is a command of
// this binary, and none of the long ones (weights, transfers, the executor's child) is among them.
func TestStartHeapCommands(t *testing.T) {
	root := newRootCommand(newGlobalOptions(io.Discard, io.Discard))
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var names []string
	for _, c := range root.Commands() {
		names = append(names, c.Name())
	}
	short := startheap.ShortCommands()
	for _, s := range short {
		if !slices.Contains(names, s) {
			t.Errorf("startheap names %q as a short command; orkpipe has no such command (%v)", s, names)
		}
	}
	for _, long := range []string{"build", "node", "eval", "qerr", "tokenize", "stub", "pack", "rank", "demo", "verify", "pull", "push", "cache"} {
		if !slices.Contains(names, long) {
			t.Errorf("orkpipe has no command %q any more: update this list", long)
		}
		if slices.Contains(short, long) {
			t.Errorf("startheap gives %q the heap advice: it runs long, and its heap grows and shrinks", long)
		}
	}
}

// TestStartHeapGlobalFlags: internal/startheap's list of global flags is the root command's, split
// the same way into flags that take a value and flags that do not, and for each of them it finds the
// command where cobra does.
func TestStartHeapGlobalFlags(t *testing.T) {
	root := newRootCommand(newGlobalOptions(io.Discard, io.Discard))
	root.InitDefaultHelpFlag()
	var value, noValue []string
	var valueShort, noValueShort string
	var argvs [][]string
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		takesValue := f.NoOptDefVal == "" // bool and count flags have one
		v := "2"
		if takesValue {
			value = append(value, f.Name)
			valueShort += f.Shorthand
			argvs = append(argvs, []string{"--" + f.Name, v, "hash", "x"}, []string{"--" + f.Name + "=" + v, "hash", "x"})
			if f.Shorthand != "" {
				argvs = append(argvs, []string{"-" + f.Shorthand, v, "hash", "x"}, []string{"-" + f.Shorthand + v, "hash", "x"})
			}
		} else {
			noValue = append(noValue, f.Name)
			noValueShort += f.Shorthand
			argvs = append(argvs, []string{"--" + f.Name, "hash", "x"})
			if f.Shorthand != "" {
				argvs = append(argvs, []string{"-" + f.Shorthand, "hash", "x"})
			}
		}
	})
	root.Flags().VisitAll(func(f *pflag.Flag) { // -h/--help: a local flag of every command
		if f.Name == "help" {
			noValue = append(noValue, f.Name)
			noValueShort += f.Shorthand
			argvs = append(argvs, []string{"--help", "hash"}, []string{"-h", "hash"})
		}
	})
	sortChars := func(s string) string { b := []byte(s); slices.Sort(b); return string(b) }
	wantValue, wantNoValue, wantValueShort, wantNoValueShort := startheap.GlobalFlags()
	slices.Sort(value)
	slices.Sort(noValue)
	slices.Sort(wantValue)
	slices.Sort(wantNoValue)
	if !slices.Equal(value, wantValue) || !slices.Equal(noValue, wantNoValue) ||
		sortChars(valueShort) != sortChars(wantValueShort) || sortChars(noValueShort) != sortChars(wantNoValueShort) {
		t.Fatalf("the root command's global flags: with a value %v (-%s), without %v (-%s); internal/startheap knows %v (-%s) and %v (-%s)",
			value, valueShort, noValue, noValueShort, wantValue, wantValueShort, wantNoValue, wantNoValueShort)
	}
	argvs = append(argvs, []string{"-vj2", "hash", "x"}, []string{"-vv", "hash", "x"}, []string{"--cache", "build", "hash"}, []string{"-j", "2", "build", "r.yaml"})
	for _, argv := range argvs {
		cmd, _, err := root.Find(argv)
		if err != nil {
			t.Errorf("cobra: Find(%q): %v", argv, err)
			continue
		}
		if got := startheap.Command(argv); got != cmd.Name() {
			t.Errorf("startheap.Command(%q) = %q; cobra runs %q", strings.Join(argv, " "), got, cmd.Name())
		}
	}
}
