package ork

import (
	"testing"

	"orkpipe/internal/crosstest"
	"orkpipe/internal/testfiles"
)

// suites are the tests of the library the board host's pull, verify, inspect, hash and pack verify
// run: BLAKE3 off amd64 (the portable tree and zeebo's Go code), the orkpack reader and the untiling
// its checks decode through (the nibble code that is not amd64's assembly), GGUF headers and stubs,
// and the board host's fingerprint; each package whole.
var suites = []crosstest.Suite{
	{Pkg: "internal/blake3x"},
	{Pkg: "ork/pack"},
	{Pkg: "ork/tile"},
	{Pkg: "ork/gguf"},
	{Pkg: "ork/boardhost"},
}

// TestBoardHostOrk runs suites built for linux/arm64 (CGO_ENABLED=0, as the board's binary is built)
// under qemu-aarch64, with -test.short; each package must pass.
func TestBoardHostOrk(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "-short: the board host's library packages' tests built for linux/arm64 (minutes under emulation)")
	}
	crosstest.RunBoardHost(t, suites)
}
