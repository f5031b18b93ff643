package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BlobExists reports whether the repository holds digest with the given size.
func (r *Repo) BlobExists(ctx context.Context, digest string, size int64) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, r.blobURL(digest).String(), nil)
	if err != nil {
		return false, err
	}
	resp, err := r.client.Do(req)
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

// Blob is a blob to upload: its digest and size, and where its bytes come from.
type Blob struct {
	Digest string // "sha256:<hex>"
	Size   int64
	// Open returns the blob's bytes from offset off to the end (off > 0 when an interrupted
	// chunked upload resumes).
	Open func(off int64) (io.ReadCloser, error)
	// Sent, when set, is told of bytes as they are sent (a resumed upload sends some again).
	Sent func(n int64)
}

// Upload sends b unless the repository already holds it (reused is then true). The first method
// (see UploadMode) falls back to the other when the registry refuses it. A chunked upload that
// fails part way asks the registry how many bytes it holds and resumes from there, up to the
// Repo's retries; with WithUploadState, so does one whose process died, in the next process, and
// an Upload of the same blob to the same repository that another one (in any process) is running
// waits for it, then sends nothing when it committed the blob (sessionlock.go). The registry
// verifies the digest named in the final PUT: bytes that do not hash to b.Digest are refused and
// reported as ErrDigestMismatch; nothing is committed then.
func (r *Repo) Upload(ctx context.Context, b Blob) (reused bool, err error) {
	if b.Sent == nil {
		b.Sent = func(int64) {}
	}
	ok, err := r.BlobExists(ctx, b.Digest, b.Size)
	if err != nil {
		return false, err
	}
	if ok {
		r.forgetCommitted(b) // a process killed between its final PUT and forgetting the session
		return true, nil
	}
	r, unlock, waited, err := r.lockSession(ctx, b)
	if err != nil {
		return false, err
	}
	defer unlock()
	if waited {
		// The holder uploaded the same bytes: once it has committed them, nothing is sent again.
		if ok, err := r.BlobExists(ctx, b.Digest, b.Size); err != nil || ok {
			if ok {
				r.forgetSession(b)
			}
			return ok, err
		}
	}
	first := r.o.uploadMode
	if first == UploadAuto {
		first = UploadMonolithic
		if b.Size > r.o.chunkSize {
			first = UploadChunked
		}
	}
	second := UploadChunked + UploadMonolithic - first
	for i, m := range []UploadMode{first, second} {
		if m == UploadChunked {
			err = r.uploadChunked(ctx, b)
		} else {
			err = r.uploadMonolithic(ctx, b)
		}
		if err == nil || !errors.Is(err, ErrRefused) {
			break
		}
		if i == 0 {
			r.o.logger.Info("registry refused upload method, falling back", "blob", b.Digest, "err", err)
		}
	}
	if err != nil && ctx.Err() != nil {
		// Canceled part way: whatever the registry answered to a cut body says nothing of the bytes.
		// A remembered session is kept: the next process resumes it.
		return false, fmt.Errorf("upload %s: %w", b.Digest, ctx.Err())
	}
	if err == nil || !Transient(err) || errors.Is(err, ErrDigestMismatch) {
		// Complete, or refused: the session is of no further use. A transient failure keeps it.
		r.forgetSession(b)
	}
	if digestInvalid(err) {
		err = fmt.Errorf("upload %s: %w: the registry computed another digest for the %d bytes sent (they changed since they were hashed, or a remembered digest is wrong)",
			b.Digest, ErrDigestMismatch, b.Size)
	}
	return false, err
}

// uploadMonolithic sends the whole blob in one PUT.
func (r *Repo) uploadMonolithic(ctx context.Context, b Blob) error {
	loc, err := r.startUpload(ctx)
	if err != nil {
		return err
	}
	rc, err := b.Open(0)
	if err != nil {
		return err
	}
	defer rc.Close()
	body := &countingReader{r: &exactReader{r: CtxReader{ctx, rc}, left: b.Size, what: b.Digest}, count: b.Sent}
	resp, err := r.finishUpload(ctx, loc, b.Digest, body, b.Size)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if refused(resp.StatusCode) {
		return fmt.Errorf("upload %s: monolithic PUT: %w (HTTP %d)", b.Digest, ErrRefused, resp.StatusCode)
	}
	return check("upload "+b.Digest, resp, http.StatusCreated)
}

// uploadChunked PATCHes the blob in chunks, resuming after a failure from the offset the registry
// reports, then commits it with an empty PUT. A session remembered by an earlier process
// (WithUploadState) is resumed first; when the registry no longer has it or refuses it (any
// failure that is neither the network's nor the source's), the upload starts afresh. So does,
// once, an upload of this process whose commit the registry refused as DIGEST_INVALID after it
// resumed within the process: the registry may answer the upload-status GET before its handler of
// the cut PATCH has stored all it received, and the bytes that handler appends after the answer
// spoil the upload (logged at warn level). A second refusal is returned (Upload reports it as
// ErrDigestMismatch: the source is then what does not match), as is any ErrDigestMismatch of the
// source itself, at once.
func (r *Repo) uploadChunked(ctx context.Context, b Blob) error {
	loc, off, ok, err := r.resumeSession(ctx, b)
	if err != nil {
		return err
	}
	if ok {
		_, err := r.chunks(ctx, b, loc, off)
		if err == nil || Transient(err) || errors.Is(err, ErrDigestMismatch) || ctx.Err() != nil {
			return err
		}
		// Also DIGEST_INVALID: the bytes the registry held came from another process.
		r.o.logger.Info("the registry refused the upload session an earlier push left; uploading the blob afresh",
			"blob", b.Digest, "repository", r.repo.String(), "resumed at", off, "err", err)
		r.forgetSession(b)
	}
	for fresh := 1; ; fresh++ {
		if loc, err = r.startUpload(ctx); err != nil {
			return err
		}
		r.saveSession(b, loc, 0)
		var resumed bool
		if resumed, err = r.chunks(ctx, b, loc, 0); fresh > 1 || !resumed || !digestInvalid(err) || ctx.Err() != nil {
			return err
		}
		r.o.logger.Warn("the registry refused the blob's commit (DIGEST_INVALID) after the upload resumed from its count of the bytes held, which may have been taken before it stored all of a cut chunk; uploading the blob afresh once",
			"blob", b.Digest, "repository", r.repo.String(), "err", err)
		r.forgetSession(b)
	}
}

// chunks sends the blob from off to the upload session at loc, remembering the session after
// every chunk the registry acknowledged, and commits it. After a failed chunk (cut, or refused
// with 416: ErrUploadOffset, the registry's offset is not the chunk's) it asks the registry how
// many bytes it holds and continues from there, each counting as an attempt (WithRetries); resumed
// says it did so on the session it ends with. When the registry's count is ambiguous
// (uploadStatus: known false), it starts a fresh session from byte 0 instead (logged at warn
// level) and cancels the old one (cancelUpload). A 416 is resumed only while it reflects progress:
// one after which the registry holds no more than it had acknowledged when the refused chunk
// started (an ambiguous count included), twice in a row with no chunk acknowledged between, is a
// refusal of the chunked method (ErrRefused, wrapping ErrUploadOffset; logged at warn level), so
// that Upload falls back to a monolithic PUT as after a 405 or 501: a registry that answers 416 to
// every PATCH used up the retries and failed the push. The session given up is cancelled then too.
func (r *Repo) chunks(ctx context.Context, b Blob, loc string, off int64) (resumed bool, err error) {
	stuck := 0 // 416s in a row after which the registry held no more than before
	for attempt := 1; ; attempt++ {
		from := off
		err = r.patchFrom(ctx, &loc, &off, b)
		if off > from {
			stuck = 0 // the registry acknowledged chunks: progress
		}
		// A source that does not match the blob (ErrDigestMismatch) is not the network's fault. A
		// chunk refused with 416 (ErrUploadOffset) is resumed as a cut one is, without waiting:
		// the registry holds another count of bytes than this upload sent.
		offset := errors.Is(err, ErrUploadOffset)
		if err == nil || !(offset || Transient(err)) || errors.Is(err, ErrRefused) || errors.Is(err, ErrDigestMismatch) || ctx.Err() != nil {
			break
		}
		if !offset && attempt >= r.o.retries {
			break
		}
		if !offset {
			Backoff(ctx, attempt)
		}
		got, known, next, serr := r.uploadStatus(ctx, loc)
		if serr != nil {
			return resumed, fmt.Errorf("upload %s: %w (and asking the registry how much it received: %v)", b.Digest, err, serr)
		}
		if offset && (!known || got <= off) {
			stuck++
		} else if offset {
			stuck = 0
		}
		if offset && stuck >= 2 {
			r.o.logger.Warn("the registry refused chunks (416) twice in a row without holding more of the upload after them; taking it for a refusal of chunked uploads",
				"blob", b.Digest, "repository", r.repo.String(), "acknowledged", off, "held", got, "held known", known, "err", err)
			r.cancelUpload(ctx, b, next)
			return resumed, fmt.Errorf("upload %s: chunked: %w: two 416 answers in a row with the registry holding no more of the upload after them (%d bytes acknowledged): %w",
				b.Digest, ErrRefused, off, err)
		}
		if attempt >= r.o.retries {
			break
		}
		if !known {
			r.o.logger.Warn("the registry's count of the bytes it holds of the blob's upload is ambiguous (none or one); starting a fresh upload session",
				"blob", b.Digest, "repository", r.repo.String(), "attempt", attempt, "err", err)
			fresh, serr := r.startUpload(ctx)
			if serr != nil {
				return resumed, fmt.Errorf("upload %s: %w (and starting a fresh upload session: %v)", b.Digest, err, serr)
			}
			r.cancelUpload(ctx, b, next)
			loc, off, resumed = fresh, 0, false
			r.saveSession(b, loc, off)
			continue
		}
		r.o.logger.Warn("resuming blob upload", "blob", b.Digest, "at", got, "of", b.Size, "attempt", attempt, "err", err)
		loc, off, resumed = next, got, true
		r.saveSession(b, loc, off)
	}
	if err != nil {
		return resumed, err
	}
	resp, err := r.finishUpload(ctx, loc, b.Digest, http.NoBody, 0)
	if err != nil {
		return resumed, err
	}
	defer resp.Body.Close()
	return resumed, check("upload "+b.Digest, resp, http.StatusCreated)
}

// patchFrom sends the blob's bytes from *off in chunks, advancing *off and *loc with every chunk
// the registry accepted (and remembering the session then).
func (r *Repo) patchFrom(ctx context.Context, loc *string, off *int64, b Blob) error {
	if *off >= b.Size {
		return nil
	}
	rc, err := b.Open(*off)
	if err != nil {
		return err
	}
	defer rc.Close()
	body := &countingReader{r: CtxReader{ctx, rc}, count: b.Sent}
	for *off < b.Size {
		n := min(r.o.chunkSize, b.Size-*off)
		chunk := io.LimitReader(body, n)
		req, err := http.NewRequestWithContext(ctx, http.MethodPatch, *loc, chunk)
		if err != nil {
			return err
		}
		req.ContentLength = n
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("Content-Range", strconv.FormatInt(*off, 10)+"-"+strconv.FormatInt(*off+n-1, 10))
		resp, err := r.client.Do(req)
		if err != nil {
			return fmt.Errorf("upload %s: PATCH at %d: %w", b.Digest, *off, err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusRequestedRangeNotSatisfiable {
			return fmt.Errorf("upload %s: PATCH of bytes %d-%d: %w (HTTP 416)", b.Digest, *off, *off+n-1, ErrUploadOffset)
		}
		if refused(resp.StatusCode) {
			return fmt.Errorf("upload %s: chunked: %w (HTTP %d)", b.Digest, ErrRefused, resp.StatusCode)
		}
		if err := check(fmt.Sprintf("upload %s: PATCH at %d", b.Digest, *off), resp, http.StatusAccepted); err != nil {
			return err
		}
		next, err := location(resp)
		if err != nil {
			return err
		}
		*loc = next
		*off += n
		r.saveSession(b, *loc, *off)
	}
	// The source must end where the blob does: a longer one changed since it was hashed.
	var one [1]byte
	if k, _ := body.Read(one[:]); k > 0 {
		return fmt.Errorf("upload %s: %w: the source has more than %d bytes", b.Digest, ErrDigestMismatch, b.Size)
	}
	return nil
}

// uploadStatus asks the registry how many bytes of the upload at loc it holds (the OCI
// distribution spec's upload status: 204 with Range "0-<last>") and returns them with the fresh
// Location it answers. known is false when the answer does not say: distribution answers "0-0"
// both for an upload holding no byte and for one holding one (blobUploadResponse: the last byte's
// offset, but 0 when there is none), and a registry may send no Range at all. Such a count is
// never guessed: PATCHing from 1 a session that holds nothing is refused, and from 0 one that
// holds a byte too. The caller starts a fresh upload session instead, losing at most that byte.
// "0--1" (no byte held, unambiguously) is 0 and known.
func (r *Repo) uploadStatus(ctx context.Context, loc string) (held int64, known bool, next string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
	if err != nil {
		return 0, false, "", err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, false, "", err
	}
	resp.Body.Close()
	if err := check("upload status", resp, http.StatusNoContent); err != nil {
		return 0, false, "", err
	}
	next, err = location(resp)
	if err != nil {
		return 0, false, "", err
	}
	rng := resp.Header.Get("Range")
	if rng == "" {
		return 0, false, next, nil
	}
	lo, hi, ok := strings.Cut(strings.TrimPrefix(rng, "bytes="), "-")
	last, err := strconv.ParseInt(hi, 10, 64)
	if !ok || lo != "0" || err != nil || last < -1 {
		return 0, false, "", fmt.Errorf("upload status: Range %q, want 0-<last byte>", rng)
	}
	if last == 0 {
		return 0, false, next, nil
	}
	return last + 1, true, next, nil
}

// cancelUpload cancels the upload session at loc (DELETE, the distribution spec's cancel), one given
// up for a fresh session, so that it does not stay on the registry, holding what it received, until
// the registry purges abandoned uploads (distribution: after a week). Best effort: a failure is
// logged at debug level and nothing else.
func (r *Repo) cancelUpload(ctx context.Context, b Blob, loc string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, loc, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = r.client.Do(req); err == nil {
			resp.Body.Close()
			err = check("DELETE upload session", resp, http.StatusNoContent)
		}
	}
	if err != nil {
		r.o.logger.Debug("could not cancel the upload session given up for a fresh one; the registry keeps it until it purges abandoned uploads",
			"blob", b.Digest, "repository", r.repo.String(), "err", err)
	}
}

// startUpload opens an upload session and returns its absolute location.
func (r *Repo) startUpload(ctx context.Context) (string, error) {
	u := r.url(fmt.Sprintf("/v2/%s/blobs/uploads/", r.repo.RepositoryStr()))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return "", err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("start upload to %s: %w", r.repo, err)
	}
	defer resp.Body.Close()
	if err := check("start upload to "+r.repo.String(), resp, http.StatusAccepted); err != nil {
		return "", err
	}
	return location(resp)
}

// finishUpload PUTs body (size bytes; none for a chunked upload) to loc with the blob's digest.
func (r *Repo) finishUpload(ctx context.Context, loc, digest string, body io.Reader, size int64) (*http.Response, error) {
	u, err := url.Parse(loc)
	if err != nil {
		return nil, fmt.Errorf("upload %s: bad location: %w", digest, err)
	}
	q := u.Query()
	q.Set("digest", digest)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("upload %s: %w", digest, err)
	}
	return resp, nil
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

// PutBlob uploads an in-memory blob (a config, an envelope) and returns its descriptor.
func (r *Repo) PutBlob(ctx context.Context, b []byte, mediaType string) (v1.Descriptor, error) {
	h, n, err := v1.SHA256(bytes.NewReader(b))
	if err != nil {
		return v1.Descriptor{}, err
	}
	open := func(off int64) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b[off:])), nil }
	if _, err := r.Upload(ctx, Blob{Digest: h.String(), Size: n, Open: open}); err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: types.MediaType(mediaType), Size: n, Digest: h}, nil
}

// exactReader fails with ErrDigestMismatch when its source holds more or fewer bytes than left
// (it changed since it was hashed), instead of letting the HTTP client send a short body or
// complain about its length.
type exactReader struct {
	r    io.Reader
	left int64
	what string
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left == 0 {
		var one [1]byte
		if n, _ := e.r.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("upload %s: %w: the source holds more bytes than the blob", e.what, ErrDigestMismatch)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		err = fmt.Errorf("upload %s: %w: the source ended %d bytes short of the blob", e.what, ErrDigestMismatch, e.left)
	}
	return n, err
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
