package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"orkpipe/registry/regtest"
)

func randomBlob(n int, seed uint64) ([]byte, string) {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed)}).Read(b)
	sum := sha256.Sum256(b)
	return b, "sha256:" + hex.EncodeToString(sum[:])
}

func blobOf(b []byte, digest string) Blob {
	return Blob{Digest: digest, Size: int64(len(b)), Open: func(off int64) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b[off:])), nil
	}}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// readAll downloads [off, off+n) of the blob digest of size bytes through OpenBlob.
func readAll(t *testing.T, r *Repo, digest string, size, off, n int64) ([]byte, error) {
	t.Helper()
	rc := r.OpenBlob(testCtx(t), v1.Descriptor{Digest: v1.Hash{Algorithm: "sha256", Hex: strings.TrimPrefix(digest, "sha256:")}, Size: size}, off, n)
	defer rc.Close()
	return io.ReadAll(rc)
}

// TestUploadResumes cuts chunked uploads half way through a PATCH: the upload asks the registry
// how much it holds and continues from there instead of starting again, and the registry holds
// the right blob. A monolithic upload cut the same way fails (transient), and the blob is absent.
func TestUploadResumes(t *testing.T) {
	ctx := testCtx(t)
	proxy := &regtest.FaultProxy{}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.Next = h; return proxy })
	b, d := randomBlob(3<<20+12345, 1)

	r, err := Open(ctx, reg.Ref("blobs/resume", "x"), true, WithPlainHTTP(reg.Host), WithUploadMode(UploadChunked, 256<<10), WithRetries(5))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Set("cut-upload", 3, 0)
	reused, err := r.Upload(ctx, blobOf(b, d))
	proxy.Set("", 0, 0)
	if err != nil || reused {
		t.Fatalf("upload: reused %v, %v", reused, err)
	}
	sent := proxy.UploadBytes.Load()
	t.Logf("blob %d bytes, the registry received %d upload bytes with 3 cut PATCHes", len(b), sent)
	if sent > int64(len(b))+3*(256<<10) {
		t.Errorf("the registry received %d bytes for a %d-byte blob: the upload restarted instead of resuming", sent, len(b))
	}
	got, err := readAll(t, r, d, int64(len(b)), 0, int64(len(b)))
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("uploaded blob differs (%v)", err)
	}

	m, err := Open(ctx, reg.Ref("blobs/mono", "x"), true, WithPlainHTTP(reg.Host), WithUploadMode(UploadMonolithic, 256<<10))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Set("cut-upload", 1, 0)
	_, err = m.Upload(ctx, blobOf(b, d))
	proxy.Set("", 0, 0)
	if err == nil || !Transient(err) {
		t.Fatalf("cut monolithic upload: %v, want a transient error", err)
	}
	if ok, err := m.BlobExists(ctx, d, int64(len(b))); ok || err != nil {
		t.Errorf("blob exists after a cut monolithic upload (%v)", err)
	}
}

// TestUploadWrongBytes: bytes that do not hash to the digest named are refused by the registry,
// reported as ErrDigestMismatch, and never committed, in both upload methods; a source longer than
// the blob (a file that grew since it was hashed) is reported the same way.
func TestUploadWrongBytes(t *testing.T) {
	ctx := testCtx(t)
	reg := regtest.Start(t, nil)
	b, d := randomBlob(1<<20, 2)
	other, _ := randomBlob(1<<20, 3)
	for _, mode := range []UploadMode{UploadMonolithic, UploadChunked} {
		r, err := Open(ctx, reg.Ref(fmt.Sprintf("blobs/wrong-%d", mode), "x"), true, WithPlainHTTP(reg.Host), WithUploadMode(mode, 256<<10))
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Upload(ctx, blobOf(other, d))
		if !errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("mode %d: upload of other bytes: %v, want ErrDigestMismatch", mode, err)
		}
		if ok, _ := r.BlobExists(ctx, d, int64(len(b))); ok {
			t.Fatalf("mode %d: wrong bytes committed under %s", mode, d)
		}
		long := append(bytes.Clone(b), 0)
		if _, err := r.Upload(ctx, Blob{Digest: d, Size: int64(len(b)), Open: blobOf(long, d).Open}); !errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("mode %d: upload from a source longer than the blob: %v, want ErrDigestMismatch", mode, err)
		}
	}
}

// TestOpenBlobRanges reads ranges of a blob through truncated and dropped responses: each range
// resumes from its last byte and returns exactly its bytes; a registry failing every request
// fails the read with an error naming the blob.
func TestOpenBlobRanges(t *testing.T) {
	ctx := testCtx(t)
	proxy := &regtest.FaultProxy{}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.Next = h; return proxy })
	b, d := randomBlob(2<<20+77, 4)
	r, err := Open(ctx, reg.Ref("blobs/ranges", "x"), true, WithPlainHTTP(reg.Host), WithRetries(4))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Upload(ctx, blobOf(b, d)); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"", "truncate", "drop"} {
		for _, rg := range [][2]int64{{0, int64(len(b))}, {1 << 20, 300_001}, {int64(len(b)) - 5, 5}} {
			proxy.Set(mode, 2, 0)
			got, err := readAll(t, r, d, int64(len(b)), rg[0], rg[1])
			if err != nil || !bytes.Equal(got, b[rg[0]:rg[0]+rg[1]]) {
				t.Errorf("%q: range %v: %d bytes, %v", mode, rg, len(got), err)
			}
		}
	}
	proxy.Set("500", -1, 0)
	defer proxy.Set("", 0, 0)
	if _, err := readAll(t, r, d, int64(len(b)), 0, 10); err == nil || !bytes.Contains([]byte(err.Error()), []byte(d)) {
		t.Errorf("read through a failing registry: %v, want an error naming %s", err, d)
	}
}

// TestOpenBlobLength: a response that says the blob is not as long as its descriptor (206
// Content-Range total, 200 Content-Length, none at all), or holds other bytes than those asked
// for, fails the read at once with ErrBlobSize naming the blob, not retried.
func TestOpenBlobLength(t *testing.T) {
	ctx := testCtx(t)
	b, d := randomBlob(1000, 5)
	var mode string
	var gets int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !strings.Contains(req.URL.Path, "/blobs/") {
			return // the /v2/ ping
		}
		gets++
		h := w.Header()
		switch mode {
		case "longer": // the real blob is one byte longer than the descriptor says
			h.Set("Content-Range", "bytes 0-998/1000")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(b[:999])
		case "star":
			h.Set("Content-Range", "bytes 0-998/*")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(b[:999])
		case "shifted":
			h.Set("Content-Range", "bytes 1-999/999")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(b[1:])
		case "whole": // Range ignored: the whole 1000-byte blob
			w.Write(b)
		case "whole-unknown":
			h.Set("Transfer-Encoding", "chunked")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			w.Write(b)
		}
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	r, err := Open(ctx, host+"/blobs/length:x", false, WithPlainHTTP(host), WithRetries(3))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode = range []string{"longer", "star", "shifted", "whole", "whole-unknown"} {
		gets = 0
		_, err := readAll(t, r, d, 999, 0, 999)
		if !errors.Is(err, ErrBlobSize) || Transient(err) || !strings.Contains(err.Error(), d) || gets != 1 {
			t.Errorf("%s: %v after %d requests, want one request and ErrBlobSize naming %s", mode, err, gets, d)
		}
	}
}

// TestOpenBlobStalls: a download that receives nothing for the idle timeout, before the response's
// headers or in its body, is dropped and resumed from its last byte (a stalled connection held a pull
// forever); one that stalls on every attempt fails with ErrStalled naming the blob.
func TestOpenBlobStalls(t *testing.T) {
	ctx := testCtx(t)
	b, d := randomBlob(1000, 6)
	var mode string
	var gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !strings.Contains(req.URL.Path, "/blobs/") {
			return // the /v2/ ping
		}
		n := gets.Add(1)
		var first, last int
		fmt.Sscanf(req.Header.Get("Range"), "bytes=%d-%d", &first, &last)
		switch {
		case mode == "headers" && n == 1, mode == "always":
			<-req.Context().Done() // never answers
			return
		case mode == "body" && n == 1:
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/1000", first, last))
			w.WriteHeader(http.StatusPartialContent)
			w.Write(b[first:500])
			w.(http.Flusher).Flush()
			<-req.Context().Done() // half the body, then nothing
			return
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/1000", first, last))
		w.WriteHeader(http.StatusPartialContent)
		w.Write(b[first : last+1])
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	r, err := Open(ctx, host+"/blobs/stall:x", false, WithPlainHTTP(host), WithRetries(3), WithIdleTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode = range []string{"headers", "body"} {
		gets.Store(0)
		got, err := readAll(t, r, d, 1000, 0, 1000)
		if err != nil || !bytes.Equal(got, b) || gets.Load() != 2 {
			t.Errorf("stalled %s once: %d bytes, %v, after %d requests; want the blob after 2", mode, len(got), err, gets.Load())
		}
	}
	mode = "always"
	if _, err := readAll(t, r, d, 1000, 0, 1000); !errors.Is(err, ErrStalled) || !strings.Contains(err.Error(), d) || !strings.Contains(err.Error(), "no byte received for 200ms") {
		t.Errorf("stalled every time: %v, want ErrStalled naming %s", err, d)
	}
}

// A local file's failure is never retried as a transfer's: syscall.Errno has Timeout and Temporary
// methods, so without the check a full disk passed for a net.Error (a pull retried each range five
// times, downloading it again each time).
func TestTransientLocalFile(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&fs.PathError{Op: "write", Path: "/pull/.data/big.bin", Err: syscall.ENOSPC}, false},
		{fmt.Errorf("range 3: %w", &fs.PathError{Op: "write", Path: "/pull/.data/big.bin", Err: syscall.EIO}), false},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{syscall.ECONNRESET, true},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
