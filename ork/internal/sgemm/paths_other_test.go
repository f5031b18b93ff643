//go:build !amd64

package sgemm

import "testing"

// forKernels runs f for the one path off amd64: dot.
func forKernels(t testing.TB, f func(name string)) { f("dot") }
