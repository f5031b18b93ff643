//go:build !unix

package model

// mapTensorBytes is not used where files are not mapped (canMapTensors).
func mapTensorBytes(path string, size, off, n int64) ([]byte, func(), error) {
	return nil, nil, ErrUnsupported
}

// canMapTensors reports whether mapTensorBytes maps (else GGUFSource.MapEncoded reads).
const canMapTensors = false
