// Package ork holds TestBoardHostOrk: the tests of the library packages the board host's commands
// run (internal/blake3x and ork's pack, tile, gguf, boardhost), built for linux/arm64 and run under
// qemu-aarch64 off arm64 (internal/arm64host).
package ork
