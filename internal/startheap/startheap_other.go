//go:build !linux || !(amd64 || arm64)

package startheap

import "errors"

func init() {
	status = errors.New("the heap advice is given on linux/amd64 and linux/arm64 only (the arena size and address math are those of 64-bit Linux)")
}

// ImageStatus says why the executable's segments were not mapped at start (see the Linux build).
func ImageStatus() error { return errImageOther }

var errImageOther = errors.New("the executable's segments are mapped at start on linux/amd64 and linux/arm64 only")
