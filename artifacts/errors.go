package artifacts

import "errors"

// Sentinel errors of the package. Every error returned by the store wraps at most one of them and
// names the digest or path concerned; test with errors.Is.
var (
	// ErrInvalidDigest is wrapped by every digest parse failure.
	ErrInvalidDigest = errors.New("invalid digest")

	// ErrNotFound: the object, action record, pin or stat-cache entry is absent. An action record
	// whose outputs are missing, wrong-sized or quarantined is also reported as ErrNotFound (a miss).
	ErrNotFound = errors.New("not found")

	// ErrCorrupt: stored bytes do not hash to their name. The object has been moved to the
	// quarantine folder and is missing from now on, so its producer re-runs.
	ErrCorrupt = errors.New("corrupt object")

	// ErrClobber: Materialize refused to overwrite a path orkpipe did not write, or one that changed
	// since orkpipe wrote it. MaterializeOptions.Force overrides it.
	ErrClobber = errors.New("refusing to overwrite")

	// ErrInvalidRecord: an action record, pin or journal entry failed validation. GetAction has
	// moved such an action record to the quarantine folder: the next lookup is a miss.
	ErrInvalidRecord = errors.New("invalid record")

	// ErrBusy: the operation needs the store to itself (GC) and another Store holds it open.
	ErrBusy = errors.New("cache in use")

	// ErrReadOnly: the operation writes to the store (stores an object or a record, takes a key
	// lock, materializes, collects) and the Store was opened read-only (OpenStoreReadOnly).
	ErrReadOnly = errors.New("cache opened read-only")
)
