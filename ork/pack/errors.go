package pack

import "errors"

// Sentinel errors; every error returned by this package wraps one of them and names the file, entry or field.
var (
	ErrNotPack     = errors.New("not an orkpack")
	ErrUnsupported = errors.New("unsupported orkpack version")
	ErrTruncated   = errors.New("truncated")
	ErrTrailing    = errors.New("trailing data")
	ErrCorrupt     = errors.New("corrupt")
	ErrIndex       = errors.New("bad index")
	ErrInput       = errors.New("bad entry input")
	ErrPlan        = errors.New("bad plan")
	ErrNotFound    = errors.New("entry not found")
	ErrClosed      = errors.New("writer closed")
)
