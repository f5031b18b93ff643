package boardhost

import "errors"

// Sentinel errors. Errors returned by this package wrap one of these with the path, digest or
// command they concern; test with errors.Is.
var (
	// ErrPackChanged: the pack's BLAKE3 after the run differs from before it.
	ErrPackChanged = errors.New("pack changed during run")
	// ErrStubChanged: the stub's BLAKE3 after the run differs from before it.
	ErrStubChanged = errors.New("stub changed during run")
	// ErrTextChanged: the evaluation text's BLAKE3 after the run differs from before it.
	ErrTextChanged = errors.New("text changed during run")
	// ErrExit: the command exited with a non-zero status or was killed by a signal.
	ErrExit = errors.New("command failed")
	// ErrTimeout: the command did not finish within its timeout; its process group was killed.
	ErrTimeout = errors.New("command timed out")
	// ErrNoScore: the command exited 0 but printed no perplexity.
	ErrNoScore = errors.New("no perplexity in the command's output")
	// ErrCommand: the command line cannot be split or expanded.
	ErrCommand = errors.New("bad run command")
	// ErrPerplexityOutput: a recognised llama-perplexity line is malformed or contradicts another.
	ErrPerplexityOutput = errors.New("malformed llama-perplexity output")
	// ErrProgram: the run program or one of its shared objects cannot be read or parsed.
	ErrProgram = errors.New("cannot fingerprint program")
	// ErrLDCache: /etc/ld.so.cache is malformed.
	ErrLDCache = errors.New("malformed ld.so.cache")
	// ErrReport: a report file is malformed or internally inconsistent.
	ErrReport = errors.New("invalid report")
	// ErrNotComparable: two reports differ in machine, run program, text or chunks.
	ErrNotComparable = errors.New("reports are not comparable")
	// ErrOption: an option's value is invalid.
	ErrOption = errors.New("invalid option")
)
