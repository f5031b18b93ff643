package registry

import (
	"orkpipe/artifacts"
)

// FileDigests identify the whole content of one file (holes read as zeros): its size, its sha256
// (what OCI clients and in-toto subjects use) and its BLAKE3 (what orkpipe verifies).
type FileDigests struct {
	Size   int64            `json:"size"`
	SHA256 string           `json:"sha256"` // "sha256:<hex>"
	BLAKE3 artifacts.Digest `json:"blake3"`
}
