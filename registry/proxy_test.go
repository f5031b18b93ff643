package registry

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// faultProxy sits in front of the real registry handler and injects faults into blob downloads
// (GET /v2/.../blobs/sha256:...). It also counts the blob bytes it lets through.
type faultProxy struct {
	next http.Handler

	mu     sync.Mutex
	mode   string // "", "truncate", "flip", "drop", "500", "refuse-put", "refuse-patch"
	faults int    // faults left to inject; -1: forever
	every  int    // inject on every Nth blob GET only (0 or 1: every one)
	only   string // when set, inject only into GETs of this blob digest
	gets   int

	blobBytes atomic.Int64
	throttle  atomic.Int64 // nanoseconds to sleep per 64 KiB of blob body (set while serving)
}

func (p *faultProxy) set(mode string, faults, every int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.faults, p.every, p.gets, p.only = mode, faults, every, 0, ""
}

// setOnly is set, with the faults injected only into GETs of blob digest.
func (p *faultProxy) setOnly(mode string, faults int, digest string) {
	p.set(mode, faults, 0)
	p.mu.Lock()
	p.only = digest
	p.mu.Unlock()
}

// take decides whether this blob GET (of path) gets the fault.
func (p *faultProxy) take(path string) string {
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

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	mode := p.mode
	p.mu.Unlock()
	switch {
	case mode == "refuse-put" && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/blobs/uploads/") && r.ContentLength > 0:
		http.Error(w, "request entity too large", http.StatusRequestEntityTooLarge)
		return
	case mode == "refuse-patch" && r.Method == http.MethodPatch:
		http.Error(w, "chunked uploads not supported", http.StatusMethodNotAllowed)
		return
	}
	if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/sha256:") {
		p.next.ServeHTTP(w, r)
		return
	}
	fault := p.take(r.URL.Path)
	if fault == "500" {
		http.Error(w, "injected failure", http.StatusInternalServerError)
		return
	}
	fw := &faultWriter{ResponseWriter: w, p: p, fault: fault}
	p.next.ServeHTTP(fw, r)
}

type faultWriter struct {
	http.ResponseWriter
	p       *faultProxy
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
	f.p.blobBytes.Add(int64(n))
	if d := time.Duration(f.p.throttle.Load()); d > 0 {
		f.sinceZz += int64(n)
		for f.sinceZz >= 64<<10 {
			f.sinceZz -= 64 << 10
			time.Sleep(d)
		}
	}
	return n, err
}
