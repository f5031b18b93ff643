package sparse

import "errors"

// ErrBadTar: an archive that is not the tar form of a file (see the package doc); the error
// wrapping it says where and what was expected.
var ErrBadTar = errors.New("not the tar form of a file")
