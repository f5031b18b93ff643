package stages

import "errors"

// Sentinel errors of the package. Errors returned here wrap one of them with the stage name, the
// field and what was expected.
var (
	// ErrUnknownStage: no kind is registered under the name.
	ErrUnknownStage = errors.New("unknown stage kind")
	// ErrBadParams: parameters that do not decode strictly or fail validation.
	ErrBadParams = errors.New("invalid stage parameters")
	// ErrBadKeyMaterial: key material that is malformed, not canonical or disagrees with the kind.
	ErrBadKeyMaterial = errors.New("invalid key material")
	// ErrBadInputs: the inputs or tools handed to Execute do not match the key material.
	ErrBadInputs = errors.New("inputs do not match the key material")
	// ErrBadOutputs: a run did not write exactly its declared outputs as regular files.
	ErrBadOutputs = errors.New("stage outputs do not match its spec")
)
