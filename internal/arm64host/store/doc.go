// Package store holds TestBoardHostStore: the tests of the board host's store (artifacts), verify's
// checks (pipelines/verify) and pulls (registry), built for linux/arm64 and run under qemu-aarch64
// off arm64 (internal/arm64host).
package store
