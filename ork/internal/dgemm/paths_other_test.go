//go:build !amd64

package dgemm

import "testing"

// forPaths runs f for the one path off amd64: gonum's own Dgemm.
func forPaths(t testing.TB, f func(path string)) { f("gonum") }
