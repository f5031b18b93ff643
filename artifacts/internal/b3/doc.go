// Package b3 is a fork of github.com/zeebo/blake3 v0.2.4 (CC0 1.0, see LICENSE): the same
// SSE4.1/AVX2 BLAKE3 code, unchanged except for the package name and import paths, plus
// subtree.go, which exposes what the upstream API hides and parallel hashing needs: the chaining
// value of a subtree that starts at a chunk counter other than zero, and parent nodes.
//
// A BLAKE3 input of n chunks (1 KiB each) is a left-complete binary tree. Cut into pieces of
// 2^k chunks, every full piece is a complete subtree, so pieces can be hashed on separate cores
// (SubtreeCV) and their chaining values merged in order (Tree). The result is bit-identical to
// hashing the whole input serially; the package tests check that against upstream.
package b3
