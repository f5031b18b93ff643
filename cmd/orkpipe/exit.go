package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"orkpipe/artifacts"
)

// Exit codes. They are decided here and nowhere else.
const (
	exitOK          = 0
	exitFailure     = 1   // a build, verification or I/O failure
	exitUsage       = 2   // bad flags, arguments or recipe
	exitInterrupted = 130 // SIGINT/SIGTERM
)

// usageError marks an error as the user's invocation being wrong (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usage error (exit status 2).
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// noArgs is the Args of a command that takes no positional arguments and has no subcommands: an
// argument is named as such (cobra.NoArgs would call it an unknown command).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%s takes no arguments, got %q (see --help)", cmd.CommandPath(), args)
	}
	return nil
}

// usageArgs makes every argument error of cmd and its subcommands a usage error (exit status 2): a
// command's own Args, and an unknown subcommand of a command with subcommands and no Args ("orkpipe pack nosuch",
// which cobra answers with the help and status 0 when the command has no Run of its own). Such a
// command given no arguments prints its help, as before.
func usageArgs(cmd *cobra.Command) {
	check := cmd.Args
	if cmd.HasSubCommands() {
		if check == nil { // its arguments can only be subcommands (stub, say, takes SOURCE besides stub verify)
			check = unknownSubcommand
		}
		if !cmd.Runnable() {
			cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		}
	}
	if check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error { return asUsage(check(c, args)) }
	}
	for _, sub := range cmd.Commands() {
		usageArgs(sub)
	}
}

// unknownSubcommand is the Args of a command with subcommands: an argument is a subcommand it does not
// have, named with the ones it may have meant.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default for its own suggestions
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return errors.New(msg)
}

// asUsage marks err as a usage error (exit status 2); nil stays nil.
func asUsage(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

// exitCode maps the error returned by the root command to the process exit status and prints it, with
// the flag that overrides a refusal to overwrite (the one place the CLI adds that hint).
func exitCode(ctx context.Context, err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	hint := ""
	if errors.Is(err, artifacts.ErrClobber) {
		hint = " (pass --force to replace it)"
	}
	fmt.Fprintf(stderr, "orkpipe: %v%s\n", err, hint)
	var ue usageError
	switch {
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
		return exitInterrupted
	case errors.As(err, &ue):
		return exitUsage
	default:
		return exitFailure
	}
}
