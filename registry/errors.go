package registry

import (
	"errors"

	"orkpipe/registry/oci"
)

// Sentinel errors. Errors returned by this package wrap one of these where it applies, and name the
// file, part and digest involved.
var (
	// ErrDigestMismatch: bytes received (or found on disk) do not match the digest the manifest
	// records (the same error as registry/oci's, which transfers wrap).
	ErrDigestMismatch = oci.ErrDigestMismatch
	// ErrInvalidManifest: a manifest or its annotations do not describe a valid orkpipe artifact.
	ErrInvalidManifest = errors.New("invalid orkpipe manifest")
	// ErrOldLayout: the artifact uses orkpipe's previous layout (1), which must be pushed again.
	ErrOldLayout = errors.New("artifact of orkpipe's previous layout")
	// ErrUntrusted: no attestation signed by a trusted key covers the artifact.
	ErrUntrusted = errors.New("no valid signature by a trusted key")
	// ErrExists: a destination file exists with different content and overwriting was not allowed.
	ErrExists = errors.New("destination exists with different content")
	// ErrNoFile: WithFiles names a file the artifact does not have.
	ErrNoFile = errors.New("no such file in the artifact")
	// ErrInvalidKey: a key file is not an ed25519 key in the expected PEM form.
	ErrInvalidKey = errors.New("invalid key")
	// ErrNoSpace: the files a pull still has to write need more bytes than the destination's
	// filesystem has free (checked before anything is downloaded, unless WithoutSpaceCheck).
	ErrNoSpace = errors.New("not enough free space for the pull")
)
