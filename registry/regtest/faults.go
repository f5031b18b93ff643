// Package regtest's FaultProxy is a test double for a network and registry that misbehave: it sits in
// front of the real registry (Start's wrap) and injects faults into blob transfers.
package regtest

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// FaultProxy sits in front of the real registry handler (set Next, or use StartFaulty) and injects
// faults into blob downloads (GET /v2/.../blobs/sha256:...) and uploads. It counts the blob bytes
// it lets through in either direction.
type FaultProxy struct {
	Next http.Handler

	mu     sync.Mutex
	mode   string // "", "truncate", "flip", "drop", "500" (downloads); "refuse-put", "refuse-patch", "cut-upload" (uploads)
	faults int    // faults left to inject; -1: forever
	every  int    // inject on every Nth blob GET only (0 or 1: every one)
	only   string // when set, inject only into GETs of this blob digest
	gets   int

	// BlobBytes counts the blob bytes served and UploadBytes those received in upload bodies (PATCH
	// and PUT); Throttle is nanoseconds to sleep per 64 KiB of blob body (set while serving).
	BlobBytes   atomic.Int64
	UploadBytes atomic.Int64
	Throttle    atomic.Int64
}

func (p *FaultProxy) Set(mode string, faults, every int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.faults, p.every, p.gets, p.only = mode, faults, every, 0, ""
}

// SetOnly is Set, with the faults injected only into GETs of blob digest.
func (p *FaultProxy) SetOnly(mode string, faults int, digest string) {
	p.Set(mode, faults, 0)
	p.mu.Lock()
	p.only = digest
	p.mu.Unlock()
}

// take decides whether this blob GET (of path) gets the fault.
func (p *FaultProxy) take(path string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.only != "" && !strings.HasSuffix(path, "/blobs/"+p.only) {
		return ""
	}
	p.gets++
	if p.mode == "" || p.faults == 0 || (p.every > 1 && p.gets%p.every != 0) {
		return ""
	}
	if p.faults > 0 {
		p.faults--
	}
	return p.mode
}

// takeUpload decides whether this upload request gets the fault.
func (p *FaultProxy) takeUpload() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.faults == 0 {
		return false
	}
	if p.faults > 0 {
		p.faults--
	}
	return true
}

// ServeHTTP passes requests to Next, with the faults of the mode set:
//
//   - truncate, drop: a blob download's body ends (drop: the connection closes) half way;
//   - flip: one byte in the middle of a blob download is flipped;
//   - 500: a blob download fails with HTTP 500;
//   - refuse-put, refuse-patch: a monolithic PUT (413) or any PATCH (405) is refused;
//   - cut-upload: the registry receives only the first half of an upload body (PATCH or PUT),
//     then the client's connection is cut without a response.
func (p *FaultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	mode := p.mode
	p.mu.Unlock()
	upload := (r.Method == http.MethodPatch || r.Method == http.MethodPut) && strings.Contains(r.URL.Path, "/blobs/uploads/")
	if upload {
		r.Body = &countBody{ReadCloser: r.Body, n: &p.UploadBytes}
	}
	switch {
	case mode == "cut-upload" && upload && r.ContentLength > 1 && p.takeUpload():
		r.Body = &cutBody{ReadCloser: r.Body, left: r.ContentLength / 2}
		p.Next.ServeHTTP(discardResponse{h: http.Header{}}, r)
		panic(http.ErrAbortHandler) // the client sees the connection drop, no status

	case mode == "refuse-put" && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/blobs/uploads/") && r.ContentLength > 0:
		http.Error(w, "request entity too large", http.StatusRequestEntityTooLarge)
		return
	case mode == "refuse-patch" && r.Method == http.MethodPatch:
		http.Error(w, "chunked uploads not supported", http.StatusMethodNotAllowed)
		return
	}
	if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/sha256:") {
		p.Next.ServeHTTP(w, r)
		return
	}
	fault := p.take(r.URL.Path)
	if fault == "500" {
		http.Error(w, "injected failure", http.StatusInternalServerError)
		return
	}
	fw := &faultWriter{ResponseWriter: w, p: p, fault: fault}
	p.Next.ServeHTTP(fw, r)
}

type faultWriter struct {
	http.ResponseWriter
	p       *FaultProxy
	fault   string
	length  int64
	written int64
	sinceZz int64
}

func (f *faultWriter) WriteHeader(code int) {
	f.length, _ = strconv.ParseInt(f.Header().Get("Content-Length"), 10, 64)
	f.ResponseWriter.WriteHeader(code)
}

func (f *faultWriter) Write(b []byte) (int, error) {
	half := f.length / 2
	switch f.fault {
	case "truncate", "drop":
		if f.written+int64(len(b)) > half {
			keep := max(half-f.written, 0)
			n, _ := f.write(b[:keep])
			if f.fault == "drop" {
				panic(http.ErrAbortHandler) // the server closes the connection mid-body
			}
			f.written += int64(len(b)) - int64(n) // swallow: the body ends short of Content-Length
			return len(b), nil
		}
	case "flip":
		if f.written <= half && half < f.written+int64(len(b)) {
			c := append([]byte(nil), b...)
			c[half-f.written] ^= 0x01
			return f.write(c)
		}
	}
	return f.write(b)
}

func (f *faultWriter) write(b []byte) (int, error) {
	n, err := f.ResponseWriter.Write(b)
	f.written += int64(n)
	f.p.BlobBytes.Add(int64(n))
	if d := time.Duration(f.p.Throttle.Load()); d > 0 {
		f.sinceZz += int64(n)
		for f.sinceZz >= 64<<10 {
			f.sinceZz -= 64 << 10
			time.Sleep(d)
		}
	}
	return n, err
}

// countBody counts the bytes read from a request body.
type countBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countBody) Read(b []byte) (int, error) {
	k, err := c.ReadCloser.Read(b)
	c.n.Add(int64(k))
	return k, err
}

// cutBody ends a request body with an error after left bytes.
type cutBody struct {
	io.ReadCloser
	left int64
}

func (c *cutBody) Read(b []byte) (int, error) {
	if c.left <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	if int64(len(b)) > c.left {
		b = b[:c.left]
	}
	k, err := c.ReadCloser.Read(b)
	c.left -= int64(k)
	return k, err
}

// discardResponse is a ResponseWriter whose response nobody receives.
type discardResponse struct{ h http.Header }

func (d discardResponse) Header() http.Header         { return d.h }
func (d discardResponse) Write(b []byte) (int, error) { return len(b), nil }
func (d discardResponse) WriteHeader(int)             {}
