package daggerenv

import "errors"

// Sentinel errors of the package (package daggerexec returns them too); returned errors wrap one
// of them with what was found and what to do.
var (
	// ErrNoEngine: no Dagger engine is configured, or the configured one does not answer.
	ErrNoEngine = errors.New("no Dagger engine")
	// ErrBadBinary: the orkpipe binary cannot run in a scratch linux/amd64 container.
	ErrBadBinary = errors.New("not a static linux/amd64 orkpipe binary")
	// ErrNoExecutor: the orkpipe-dagger program (cmd/orkpipe-dagger) cannot be found.
	ErrNoExecutor = errors.New("no " + ExecutorName + " program")
)
