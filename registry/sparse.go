package registry

import "orkpipe/artifacts/sparse"

// Extent is a byte range [Off, Off+Len) of a file (package artifacts/sparse, which also writes
// the tar form of a file).
type Extent = sparse.Extent
