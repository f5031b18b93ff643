package registry

import (
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/registry/oci"
	"orkpipe/registry/regtest"
)

func TestPullFaults(t *testing.T) {
	ctx := ctxT(t)
	proxy := &regtest.FaultProxy{}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.Next = h; return proxy })
	src := buildDir(t)
	ref := reg.Ref("packs/faults", "v1")
	res, err := Push(ctx, src, ref, plain(reg), testRange)
	if err != nil {
		t.Fatal(err)
	}
	var ranges int
	for _, f := range res.Artifact.Files {
		ranges += len(f.Ranges)
	}

	tests := []struct {
		name    string
		mode    string
		faults  int
		every   int
		wantErr bool
	}{
		{"truncated responses", "truncate", 4, 0, false},
		{"one flipped byte", "flip", 1, 0, false},
		{"dropped connections", "drop", 4, 0, false},
		{"intermittent 500s", "500", -1, 2, false},
		{"every body corrupted", "flip", -1, 0, true},
		{"every request fails", "500", -1, 0, true},
		{"every body truncated", "truncate", -1, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			proxy.Set(tc.mode, tc.faults, tc.every)
			defer proxy.Set("", 0, 0)
			dst := filepath.Join(t.TempDir(), "out")
			pr, err := Pull(ctx, ref, dst, plain(reg), WithJobs(2), WithRetries(3))
			if tc.wantErr {
				if err == nil {
					t.Fatal("pull succeeded through a registry that corrupts every blob")
				}
				msg := err.Error()
				if !strings.Contains(msg, " range ") || !strings.Contains(msg, "sha256:") {
					t.Errorf("error does not name the range and layer digest: %v", err)
				}
				if tc.mode == "flip" && !errors.Is(err, ErrDigestMismatch) {
					t.Errorf("corruption error does not wrap ErrDigestMismatch: %v", err)
				}
				t.Logf("error: %.300s", msg)
				noPulledFiles(t, dst)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("downloaded %d bytes for %d ranges", pr.Downloaded, ranges)
			sameFiles(t, src, dst)
		})
	}
}

func TestUploadFallback(t *testing.T) {
	ctx := ctxT(t)
	proxy := &regtest.FaultProxy{}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.Next = h; return proxy })
	src := buildDir(t)
	for _, tc := range []struct {
		name, refuse string
		mode         oci.UploadMode
	}{
		{"monolithic refused, chunked used", "refuse-put", oci.UploadMonolithic},
		{"chunked refused, monolithic used", "refuse-patch", oci.UploadChunked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy.Set(tc.refuse, -1, 0)
			repo := "packs/" + tc.refuse
			res, err := Push(ctx, src, reg.Ref(repo, "v1"), plain(reg), testRange, WithUploadMode(tc.mode, 100<<10))
			proxy.Set("", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if res.Uploaded == 0 {
				t.Fatal("nothing uploaded")
			}
			dst := filepath.Join(t.TempDir(), "out")
			if _, err := Pull(ctx, reg.Ref(repo, "v1"), dst, plain(reg)); err != nil {
				t.Fatal(err)
			}
			sameFiles(t, src, dst)
		})
	}
}
