//go:build !linux

package startheap

import "errors"

func init() { status = errors.New("transparent huge pages are advised on Linux only") }
