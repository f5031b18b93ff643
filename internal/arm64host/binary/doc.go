// Package binary holds TestBoardHostBinary: the board host's static linux/arm64 orkpipe (CGO_ENABLED=0
// GOOS=linux GOARCH=arm64 go build ./cmd/orkpipe) pulls a pushed, signed build, verifies it, runs the
// board's command against it and attests the result, under qemu-aarch64 off arm64 (internal/arm64host).
package binary
