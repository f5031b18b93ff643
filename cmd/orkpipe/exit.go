package main

import (
	"context"
	"errors"
	"fmt"
	"io"

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
