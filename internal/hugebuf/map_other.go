//go:build !linux

package hugebuf

// mapBytes makes no mappings here: Make allocates on the Go heap.
func mapBytes(size int, huge bool) ([]byte, func(), error) { return nil, nil, nil }

// reserve does nothing where Make makes no mappings (the limit counts the heap's buffers already).
func reserve(n int64) func() { return func() {} }
