package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
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

// transient reports whether err is worth retrying: network failures, truncations, 5xx, 408, 429.
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var se *statusError
	if errors.As(err, &se) {
		return se.status >= 500 || se.status == http.StatusTooManyRequests || se.status == http.StatusRequestTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrDigestMismatch) {
		return true
	}
	var ue *url.Error
	return errors.As(err, &ue) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "connection reset")
}

// refused reports a status meaning "this upload method is not accepted here".
func refused(status int) bool {
	switch status {
	case http.StatusRequestEntityTooLarge, http.StatusMethodNotAllowed, http.StatusNotImplemented,
		http.StatusRequestedRangeNotSatisfiable, http.StatusLengthRequired:
		return true
	}
	return false
}

// blobExists reports whether the repository already holds digest with the given size.
func (t *target) blobExists(ctx context.Context, digest string, size int64) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, t.blobURL(digest).String(), nil)
	if err != nil {
		return false, err
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return false, fmt.Errorf("HEAD blob %s: %w", digest, err)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return resp.ContentLength == size || resp.ContentLength < 0, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, check("HEAD blob "+digest, resp, http.StatusOK, http.StatusNotFound)
}

// verifyingReader passes r through and fails instead of returning EOF when the bytes read do not
// have exactly the expected size and sha256. A blob upload fed by it aborts rather than complete
// with bytes that changed since they were hashed.
type verifyingReader struct {
	r      io.Reader
	h      hash.Hash
	n      int64
	size   int64
	digest string
	what   string
}

func newVerifyingReader(r io.Reader, size int64, digest, what string) *verifyingReader {
	return &verifyingReader{r: r, h: sha256.New(), size: size, digest: digest, what: what}
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += n64(n)
	if v.n > v.size {
		return n, fmt.Errorf("%s: %w: more than %d bytes", v.what, ErrDigestMismatch, v.size)
	}
	if err == io.EOF {
		got := "sha256:" + hex.EncodeToString(v.h.Sum(nil))
		if v.n != v.size || got != v.digest {
			return n, fmt.Errorf("%s: %w: read %d bytes %s, want %d bytes %s", v.what, ErrDigestMismatch, v.n, got, v.size, v.digest)
		}
	}
	return n, err
}

func n64(n int) int64 { return int64(n) }

// castagnoli is the CRC-32C table (hardware-accelerated on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crcReader is the upload-side check of a pushed part: it passes r through and fails instead of
// returning EOF when the bytes read do not have exactly the size and CRC-32C that pass 1 saw while
// computing the part's sha256. It catches a file changed between the two passes for a sixth of the
// cost of a second sha256; the registry verifies the sha256 itself (the upload names its digest),
// and every pull verifies it again.
type crcReader struct {
	r    io.Reader
	crc  uint32
	want uint32
	n    int64
	size int64
	what string
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	c.n += int64(n)
	if c.n > c.size {
		return n, fmt.Errorf("%s: %w: more than %d bytes (changed since it was hashed)", c.what, ErrDigestMismatch, c.size)
	}
	if err == io.EOF && (c.n != c.size || c.crc != c.want) {
		return n, fmt.Errorf("%s: %w: read %d bytes with CRC-32C %08x, hashed %d bytes with %08x (changed since it was hashed)", c.what, ErrDigestMismatch, c.n, c.crc, c.size, c.want)
	}
	return n, err
}

// uploadBlob uploads the blob (digest, size) whose bytes open() yields, unless the registry already
// has it (reused is then true). It tries the configured method first and falls back to the other
// one on ErrRefused. The bytes sent are re-hashed on the way and the upload aborts if they differ.
func (t *target) uploadBlob(ctx context.Context, digest string, size int64, open func() (io.ReadCloser, error), count func(int64)) (reused bool, err error) {
	check := func(r io.Reader) io.Reader { return newVerifyingReader(r, size, digest, "upload "+digest) }
	return t.uploadBlobCheck(ctx, digest, size, open, check, count)
}

// uploadBlobCheck is uploadBlob with the check of the bytes sent given by the caller: check wraps
// the reader of the blob's bytes and must fail instead of returning EOF when they are not the
// blob's (the registry then never sees a complete upload).
func (t *target) uploadBlobCheck(ctx context.Context, digest string, size int64, open func() (io.ReadCloser, error), check func(io.Reader) io.Reader, count func(int64)) (reused bool, err error) {
	ok, err := t.blobExists(ctx, digest, size)
	if err != nil {
		return false, err
	}
	if ok {
		count(size)
		return true, nil
	}
	modes := []UploadMode{t.o.uploadMode, 1 - t.o.uploadMode}
	for i, m := range modes {
		err = t.uploadOnce(ctx, m, digest, size, open, check, count)
		if err == nil || !errors.Is(err, ErrRefused) {
			return false, err
		}
		if i == 0 {
			t.o.logger.Info("registry refused upload method, falling back", "blob", digest, "err", err)
		}
	}
	return false, err
}

func (t *target) uploadOnce(ctx context.Context, m UploadMode, digest string, size int64, open func() (io.ReadCloser, error), verify func(io.Reader) io.Reader, count func(int64)) error {
	loc, err := t.startUpload(ctx)
	if err != nil {
		return err
	}
	rc, err := open()
	if err != nil {
		return err
	}
	defer rc.Close()
	body := verify(rc)
	body = &countingReader{r: body, count: count}
	if m == UploadChunked {
		loc, err = t.patchChunks(ctx, loc, body, size)
		if err != nil {
			return err
		}
		body, size = http.NoBody, 0
	}
	u, err := url.Parse(loc)
	if err != nil {
		return fmt.Errorf("upload %s: bad location: %w", digest, err)
	}
	q := u.Query()
	q.Set("digest", digest)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), body)
	if err != nil {
		return err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := t.client.Do(req)
	if err != nil {
		return fmt.Errorf("upload %s: %w", digest, err)
	}
	defer resp.Body.Close()
	if m == UploadMonolithic && refused(resp.StatusCode) {
		return fmt.Errorf("upload %s: monolithic PUT: %w (HTTP %d)", digest, ErrRefused, resp.StatusCode)
	}
	return check("upload "+digest, resp, http.StatusCreated)
}

// startUpload opens an upload session and returns its absolute location.
func (t *target) startUpload(ctx context.Context) (string, error) {
	u := t.url(fmt.Sprintf("/v2/%s/blobs/uploads/", t.repo.RepositoryStr()))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return "", err
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("start upload to %s: %w", t.repo, err)
	}
	defer resp.Body.Close()
	if err := check("start upload to "+t.repo.String(), resp, http.StatusAccepted); err != nil {
		return "", err
	}
	return location(resp)
}

func location(resp *http.Response) (string, error) {
	loc := resp.Header.Get("Location")
	if loc == "" {
		return "", fmt.Errorf("%s %s: no Location header in the response", resp.Request.Method, resp.Request.URL.Redacted())
	}
	u, err := resp.Request.URL.Parse(loc)
	if err != nil {
		return "", fmt.Errorf("bad Location %q: %w", loc, err)
	}
	return u.String(), nil
}

// patchChunks sends body in chunks of t.o.chunkSize and returns the location for the final PUT.
func (t *target) patchChunks(ctx context.Context, loc string, body io.Reader, size int64) (string, error) {
	for off := int64(0); off < size; {
		n := min(t.o.chunkSize, size-off)
		req, err := http.NewRequestWithContext(ctx, http.MethodPatch, loc, io.LimitReader(body, n))
		if err != nil {
			return "", err
		}
		req.ContentLength = n
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("Content-Range", strconv.FormatInt(off, 10)+"-"+strconv.FormatInt(off+n-1, 10))
		resp, err := t.client.Do(req)
		if err != nil {
			return "", fmt.Errorf("PATCH chunk at %d: %w", off, err)
		}
		resp.Body.Close()
		if refused(resp.StatusCode) {
			return "", fmt.Errorf("chunked upload: %w (HTTP %d)", ErrRefused, resp.StatusCode)
		}
		if err := check(fmt.Sprintf("PATCH chunk at %d", off), resp, http.StatusAccepted); err != nil {
			return "", err
		}
		if loc, err = location(resp); err != nil {
			return "", err
		}
		off += n
	}
	// Drain to make the verifying reader check size and digest before the upload is committed.
	if _, err := io.Copy(io.Discard, body); err != nil {
		return "", err
	}
	return loc, nil
}

// countingReader reports bytes as they are read.
type countingReader struct {
	r     io.Reader
	count func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.count(int64(n))
	}
	return n, err
}

// openBlob starts a GET of digest from byte off (a Range request when off > 0).
func (t *target) openBlob(ctx context.Context, digest string, off int64) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.blobURL(digest).String(), nil)
	if err != nil {
		return nil, err
	}
	if off > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(off, 10)+"-")
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET blob %s: %w", digest, err)
	}
	if err := check("GET blob "+digest, resp, http.StatusOK, http.StatusPartialContent); err != nil {
		resp.Body.Close()
		return nil, err
	}
	if off > 0 && resp.StatusCode == http.StatusOK { // range ignored: skip what we already have
		if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("GET blob %s: skipping to %d: %w", digest, off, err)
		}
	}
	return resp.Body, nil
}

// resumingReader reads a blob of known size, re-requesting from the current offset (Range) when a
// response ends early or the connection drops, up to max resumptions. It does not verify content:
// its caller hashes what it returns.
type resumingReader struct {
	ctx     context.Context
	t       *target
	digest  string
	size    int64
	off     int64
	body    io.ReadCloser
	resumes int
	max     int
}

func (r *resumingReader) Read(p []byte) (int, error) {
	for {
		if r.off >= r.size {
			return 0, io.EOF
		}
		if r.body == nil {
			b, err := r.t.openBlob(r.ctx, r.digest, r.off)
			if err != nil {
				if transient(err) && r.resumes < r.max {
					r.resumes++
					continue
				}
				return 0, err
			}
			r.body = b
		}
		if int64(len(p)) > r.size-r.off {
			p = p[:r.size-r.off]
		}
		n, err := r.body.Read(p)
		r.off += int64(n)
		if err == nil || (err == io.EOF && r.off >= r.size) {
			return n, nil
		}
		// The response ended early or the connection dropped: resume from r.off.
		r.body.Close()
		r.body = nil
		if cerr := r.ctx.Err(); cerr != nil {
			return n, cerr
		}
		if r.resumes >= r.max {
			return n, fmt.Errorf("GET blob %s: stopped at byte %d of %d after %d resumptions: %w", r.digest, r.off, r.size, r.resumes, err)
		}
		r.resumes++
		if n > 0 {
			return n, nil
		}
	}
}

func (r *resumingReader) Close() error {
	if r.body != nil {
		return r.body.Close()
	}
	return nil
}
