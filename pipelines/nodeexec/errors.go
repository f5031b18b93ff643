package nodeexec

import "errors"

// Sentinel errors of the package; returned errors wrap one of them with the path, field and
// what was expected.
var (
	// ErrBadNodeDir: the input directory lacks a file the key material names, a file there does
	// not hash to its name, the output directory is not empty, or the key does not match.
	ErrBadNodeDir = errors.New("invalid node directory")
	// ErrBadResult: a result record that is missing, malformed, or describes another node.
	ErrBadResult = errors.New("invalid node result record")
	// ErrExportMismatch: an output file that differs from its result record (presence, type,
	// size or digest) — a corrupted or tampered export.
	ErrExportMismatch = errors.New("node output does not match its result record")
)
