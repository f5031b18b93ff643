package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Sentinel errors. Errors returned by this package wrap one of these where it applies, and name
// the blob involved.
var (
	// ErrDigestMismatch: bytes received, or sent, do not have the digest and size they should.
	ErrDigestMismatch = errors.New("digest mismatch")
	// ErrBlobSize: the registry's blob is not as long as its descriptor says (a response's
	// Content-Range total or Content-Length); not transient: the blob is what it is.
	ErrBlobSize = errors.New("blob length differs from its descriptor")
	// ErrStalled: a blob download received no byte for the idle timeout (WithIdleTimeout); transient:
	// the download resumes from the last byte received.
	ErrStalled = errors.New("blob download stalled")
	// ErrRefused: the registry refused an upload method (e.g. 413 on a monolithic PUT).
	ErrRefused = errors.New("registry refused upload method")
	// ErrUploadOffset: the registry refused a chunk of an upload with 416: the bytes it holds of
	// the upload (or the offset its Location's state counts) are not where the chunk starts. A
	// chunked upload asks it how much it holds and continues from there, as after a cut chunk.
	ErrUploadOffset = errors.New("registry holds another offset of the upload")
)

// statusError is an unexpected HTTP status, classified as transient (retry) or not.
type statusError struct {
	op     string
	status int
	err    error
}

func (e *statusError) Error() string { return fmt.Sprintf("%s: %v", e.op, e.err) }
func (e *statusError) Unwrap() error { return e.err }

// check returns nil when resp has one of codes, else a statusError (closing nothing).
func check(op string, resp *http.Response, codes ...int) error {
	if err := transport.CheckError(resp, codes...); err != nil {
		return &statusError{op: op, status: resp.StatusCode, err: err}
	}
	return nil
}

// Transient reports whether err is worth retrying: network failures, truncations, corrupt bytes,
// 5xx, 408, 429; never a local file's failure (*fs.PathError).
func Transient(err error) bool {
	if errors.Is(err, ErrStalled) {
		return true
	}
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var se *statusError
	if errors.As(err, &se) {
		return se.status >= 500 || se.status == http.StatusTooManyRequests || se.status == http.StatusRequestTimeout
	}
	// A local file's failure (no space left, a read-only or failing disk) is no transfer's, and
	// retrying it downloads again for nothing; it must be ruled out first, since syscall.Errno has
	// Timeout and Temporary methods and would pass for a net.Error.
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrDigestMismatch) {
		return true
	}
	var ue *url.Error
	return errors.As(err, &ue) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "connection reset")
}

// Backoff sleeps 100ms * 2^(attempt-1), at most 5s, or until ctx is done.
func Backoff(ctx context.Context, attempt int) {
	d := min(100*time.Millisecond<<(attempt-1), 5*time.Second)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// refused reports a status meaning "this upload method is not accepted here". 416 is not one: on a
// PATCH it says the registry's offset of the upload differs from the chunk's (ErrUploadOffset).
func refused(status int) bool {
	switch status {
	case http.StatusRequestEntityTooLarge, http.StatusMethodNotAllowed, http.StatusNotImplemented,
		http.StatusLengthRequired:
		return true
	}
	return false
}

// digestInvalid reports a registry's refusal of an upload whose bytes do not hash to the digest
// named in the final PUT (DIGEST_INVALID).
func digestInvalid(err error) bool {
	var te *transport.Error
	if !errors.As(err, &te) {
		return false
	}
	for _, d := range te.Errors {
		if d.Code == transport.DigestInvalidErrorCode {
			return true
		}
	}
	return false
}

// CtxReader makes a long copy honour ctx between reads.
type CtxReader struct {
	Ctx context.Context
	R   io.Reader
}

func (c CtxReader) Read(p []byte) (int, error) {
	if err := c.Ctx.Err(); err != nil {
		return 0, err
	}
	return c.R.Read(p)
}
