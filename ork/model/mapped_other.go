//go:build !unix

package model

import "os"

// mapTensorBytes is not used where files are not mapped (canMapTensors).
func mapTensorBytes(f *os.File, name string, size, off, n int64) ([]byte, func(), error) {
	return nil, nil, ErrUnsupported
}

// canMapTensors reports whether mapTensorBytes maps (else GGUFSource.MapEncoded reads).
const canMapTensors = false
