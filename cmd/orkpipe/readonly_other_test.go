//go:build !linux

package main

import (
	"testing"

	"orkpipe/internal/testfiles"
)

// checkOnReadOnlyMount needs Linux's mount namespaces and bind mounts; elsewhere root's case is
// left to the Linux build (the permission case runs as any other user).
func checkOnReadOnlyMount(t *testing.T, rc roCache) {
	t.Helper()
	testfiles.SkipBuild(t, "a read-only bind mount in a mount namespace of its own is Linux's")
}
