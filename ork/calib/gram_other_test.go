//go:build !amd64

package calib

import "testing"

// forGramPaths runs f for the one path off amd64: the sums in Go.
func forGramPaths(t testing.TB, f func(path string)) { f("go") }
