//go:build !amd64

package stages

import "runtime"

// goArith: off amd64 the compiled Go float code is another compiler back end's (arm64's, for one,
// fuses x*y + z into one rounding), so its nodes never share keys with an amd64 build's.
var goArith = "go " + runtime.GOARCH
