// Package arm64host holds no code: its packages are the tests of orkpipe as the board hosts run it,
// built for linux/arm64 (CGO_ENABLED=0 GOOS=linux GOARCH=arm64, as the board's binary is) and run under
// qemu-aarch64 (Debian's qemu-user; .ci/run installs it, and with CI set its absence fails the tests):
//
//   - internal/arm64host/binary: the static linux/arm64 binary (go build ./cmd/orkpipe) pulling a
//     pack on an RK3588 board's host, verifying it, running the board's command against it and
//     attesting the result;
//   - internal/arm64host/ork: the tests of the library packages the board host's commands run (BLAKE3
//     off amd64, the orkpack reader and the untiling its checks decode through, GGUF headers and
//     stubs, the board host's fingerprint);
//   - internal/arm64host/store: the tests of its store (hashes, ingest), verify's checks and the
//     registry's pulls.
//
// Three packages rather than one because each go test package binary has its own timeout (10 minutes
// by default, and the README's command is plain go test ./...) and they run beside other packages:
// under emulation on a loaded 2-core machine the single package took up to 509 s and once timed out.
//
// Left out of the packages' suites: the build side's tests, and those that hold a child process's
// memory or the kernel's page state to a bound (under qemu-user the emulator's own pages count, and
// madvise is not passed on).
//
// Nothing else runs arm64 code: CI cross-compiles the binary, and every other test runs on the build
// host's amd64, where the kernels' assembly, GOAMD64's code generation and the amd64 paths of
// golang.org/x/sys take the place of what a board host executes (the portable BLAKE3 tree, Go's own
// float code, which the arm64 compiler fuses into multiply-adds).
package arm64host
