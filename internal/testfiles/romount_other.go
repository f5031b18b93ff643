//go:build !linux

package testfiles

import "testing"

// InReadOnlyMount needs Linux's mount namespaces and bind mounts: elsewhere it skips (SkipBuild).
func InReadOnlyMount(t *testing.T, helper, dir string, payload any) {
	t.Helper()
	SkipBuild(t, "a read-only bind mount in a mount namespace of its own is Linux's")
}

// ReadOnlyMountChild is never in InReadOnlyMount's child off Linux: it skips (SkipHelper).
func ReadOnlyMountChild(t *testing.T, parent string, v any) bool {
	t.Helper()
	SkipHelper(t, parent)
	return false
}
