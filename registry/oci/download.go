package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// openRange starts a GET of bytes [off, off+n) of the blob desc (n < 0: to the end). A registry
// that ignores the Range header (200) is read from its start, the bytes before off skipped. The
// request, headers and body, fails with ErrStalled when no byte arrives for the idle timeout. The
// response must say the blob is desc.Size bytes (ErrBlobSize otherwise, not transient): a 206's
// Content-Range total, a 200's Content-Length; a 206 must also start at off and end inside the
// range asked for.
func (r *Repo) openRange(ctx context.Context, desc v1.Descriptor, off, n int64) (rc io.ReadCloser, err error) {
	digest := desc.Digest.String()
	body := newIdleBody(ctx, r.o.idle, digest)
	defer func() {
		if err != nil {
			err = body.stalledErr(err)
			body.Close()
		}
	}()
	req, err := http.NewRequestWithContext(body.ctx, http.MethodGet, r.blobURL(digest).String(), nil)
	if err != nil {
		return nil, err
	}
	switch {
	case n >= 0:
		req.Header.Set("Range", "bytes="+strconv.FormatInt(off, 10)+"-"+strconv.FormatInt(off+n-1, 10))
	case off > 0:
		req.Header.Set("Range", "bytes="+strconv.FormatInt(off, 10)+"-")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET blob %s: %w", digest, err)
	}
	body.rc = resp.Body // closed by body.Close, on an error below too
	if err := check("GET blob "+digest, resp, http.StatusOK, http.StatusPartialContent); err != nil {
		return nil, err
	}
	if err := checkLength(resp, desc, off, n); err != nil {
		return nil, err
	}
	if off > 0 && resp.StatusCode == http.StatusOK { // range ignored: skip what we do not want
		if _, err := io.CopyN(io.Discard, body, off); err != nil {
			return nil, fmt.Errorf("GET blob %s: skipping to %d: %w", digest, off, err)
		}
	}
	return body, nil
}

// checkLength checks that a blob response says the blob has desc.Size bytes and, for a 206, holds
// bytes from off to at most off+n-1 (the rest is resumed by resumingReader).
func checkLength(resp *http.Response, desc v1.Descriptor, off, n int64) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("GET blob %s (bytes %d-%d): %w: %s", desc.Digest, off, off+n-1, ErrBlobSize, fmt.Sprintf(format, a...))
	}
	if resp.StatusCode == http.StatusOK {
		if resp.ContentLength != desc.Size {
			if resp.ContentLength < 0 {
				return bad("the registry ignored the Range header and did not say how long the blob is; the manifest says %d bytes", desc.Size)
			}
			return bad("the registry's blob is %d bytes (Content-Length of a whole-blob response), the manifest says %d", resp.ContentLength, desc.Size)
		}
		return nil
	}
	cr := resp.Header.Get("Content-Range")
	first, last, total, ok := parseContentRange(cr)
	switch {
	case !ok:
		return bad("Content-Range %q: want \"bytes FIRST-LAST/TOTAL\"", cr)
	case total != desc.Size:
		return bad("the registry's blob is %d bytes (Content-Range %q), the manifest says %d", total, cr, desc.Size)
	case first != off || (n >= 0 && last > off+n-1):
		return bad("the registry sent bytes %d-%d (Content-Range %q)", first, last, cr)
	case resp.ContentLength >= 0 && resp.ContentLength != last-first+1:
		return bad("Content-Length %d for Content-Range %q", resp.ContentLength, cr)
	}
	return nil
}

// parseContentRange parses "bytes FIRST-LAST/TOTAL" with FIRST <= LAST < TOTAL (a TOTAL of "*",
// unknown, is not accepted: the length is what is checked).
func parseContentRange(s string) (first, last, total int64, ok bool) {
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return 0, 0, 0, false
	}
	span, tot, ok1 := strings.Cut(rest, "/")
	f, l, ok2 := strings.Cut(span, "-")
	if !ok1 || !ok2 {
		return 0, 0, 0, false
	}
	num := func(s string) int64 {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 || strconv.FormatInt(v, 10) != s {
			return -1
		}
		return v
	}
	first, last, total = num(f), num(l), num(tot)
	return first, last, total, first >= 0 && last >= first && total > last
}

// OpenBlob returns a reader of bytes [off, off+n) of the blob desc: one HTTP Range request,
// re-requested from the last byte received when a response ends early or the connection drops, up
// to the Repo's retries. Every response must say that the blob is desc.Size bytes long (its
// Content-Range total; ErrBlobSize otherwise), so that a reader of the blob's ranges that hashes
// them knows nothing follows them. It checks nothing about the content: its caller hashes what it
// reads. A read error that is not io.EOF is the transfer's failure.
func (r *Repo) OpenBlob(ctx context.Context, desc v1.Descriptor, off, n int64) io.ReadCloser {
	return &resumingReader{ctx: ctx, r: r, desc: desc, digest: desc.Digest.String(), start: off, size: n, max: r.o.retries}
}

// resumingReader reads bytes [start, start+size) of a blob (see OpenBlob).
type resumingReader struct {
	ctx     context.Context
	r       *Repo
	desc    v1.Descriptor
	digest  string
	start   int64
	size    int64
	off     int64 // bytes delivered
	body    io.ReadCloser
	resumes int
	max     int
}

func (rr *resumingReader) Read(p []byte) (int, error) {
	for {
		if rr.off >= rr.size {
			return 0, io.EOF
		}
		if rr.body == nil {
			b, err := rr.r.openRange(rr.ctx, rr.desc, rr.start+rr.off, rr.size-rr.off)
			if err != nil {
				if Transient(err) && rr.resumes < rr.max {
					rr.resumes++
					Backoff(rr.ctx, rr.resumes)
					continue
				}
				return 0, err
			}
			rr.body = b
		}
		if int64(len(p)) > rr.size-rr.off {
			p = p[:rr.size-rr.off]
		}
		n, err := rr.body.Read(p)
		rr.off += int64(n)
		if err == nil || (err == io.EOF && rr.off >= rr.size) {
			return n, nil
		}
		// The response ended early or the connection dropped: resume from rr.off.
		rr.body.Close()
		rr.body = nil
		if cerr := rr.ctx.Err(); cerr != nil {
			return n, cerr
		}
		if rr.resumes >= rr.max {
			return n, fmt.Errorf("GET blob %s: stopped at byte %d of [%d, %d) after %d resumptions: %w", rr.digest, rr.start+rr.off, rr.start, rr.start+rr.size, rr.resumes, err)
		}
		rr.resumes++
		if n > 0 {
			return n, nil
		}
	}
}

func (rr *resumingReader) Close() error {
	if rr.body != nil {
		return rr.body.Close()
	}
	return nil
}

// ReadBlob downloads a small blob (a config, an envelope, a record) of at most max bytes and
// checks its size and sha256 against desc.
func (r *Repo) ReadBlob(ctx context.Context, desc v1.Descriptor, max int64) ([]byte, error) {
	if desc.Size > max || desc.Size < 0 {
		return nil, fmt.Errorf("blob %s: %d bytes, want at most %d", desc.Digest, desc.Size, max)
	}
	rc := r.OpenBlob(ctx, desc, 0, desc.Size)
	defer rc.Close()
	return io.ReadAll(NewVerifyReader(rc, desc.Size, desc.Digest.String(), "blob "+desc.Digest.String()))
}

// VerifyReader passes a reader through and fails instead of returning io.EOF when the bytes read
// do not have exactly the expected size and sha256 (ErrDigestMismatch). A consumer that commits
// only at EOF (a store ingest, an upload) then never commits wrong bytes.
type VerifyReader struct {
	r      io.Reader
	h      hash.Hash
	n      int64
	size   int64
	digest string
	what   string
}

// NewVerifyReader checks that r yields size bytes hashing to digest ("sha256:<hex>"); what names
// the bytes in errors.
func NewVerifyReader(r io.Reader, size int64, digest, what string) *VerifyReader {
	return &VerifyReader{r: r, h: sha256.New(), size: size, digest: digest, what: what}
}

func (v *VerifyReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
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
