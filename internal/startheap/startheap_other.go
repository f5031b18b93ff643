//go:build !linux || !(amd64 || arm64)

package startheap

import "errors"

func init() {
	status = errors.New("the heap advice is given on linux/amd64 and linux/arm64 only (the arena size and address math are those of 64-bit Linux)")
}
