package verify

import "errors"

// Sentinel errors; errors returned by this package wrap one of them with the file, field or ref.
var (
	// ErrLayout: the directory is not a build directory (no pack, several packs, no stub, ...).
	ErrLayout = errors.New("not a build directory")
	// ErrProvenance: provenance.json is missing, malformed or does not match the files.
	ErrProvenance = errors.New("integrity check failed")
	// ErrRecorded: report.json does not carry what the build recorded (e.g. verify.stub_header).
	ErrRecorded = errors.New("build record incomplete")
	// ErrOption: an option's value is invalid.
	ErrOption = errors.New("invalid option")
	// ErrNotSatisfied: no attestation in the registry satisfies a verify-board node.
	ErrNotSatisfied = errors.New("board verification not satisfied")
)
