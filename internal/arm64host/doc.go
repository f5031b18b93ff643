// Package arm64host holds the tests of orkpipe as the board hosts run it: the static linux/arm64
// binary (CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build ./cmd/orkpipe) that pulls a pack on an
// RK3588 board's host, verifies it, runs the board's command against it and attests the result, and
// the tests of the packages it runs there, built for linux/arm64. Both run under qemu-aarch64
// (Debian's qemu-user; .ci/run installs it, and with CI set its absence fails the tests).
//
// Nothing else runs arm64 code: CI cross-compiles the binary, and every other test runs on the build
// host's amd64, where the kernels' assembly, GOAMD64's code generation and the amd64 paths of
// golang.org/x/sys take the place of what a board host executes (the portable BLAKE3 tree, Go's own
// float code, which the arm64 compiler fuses into multiply-adds).
package arm64host
