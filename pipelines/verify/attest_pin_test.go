package verify_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"orkpipe/ork/pack"
	"orkpipe/pipelines/verify"
	"orkpipe/pipelines/verify/verifytest"
	"orkpipe/registry"
	"orkpipe/registry/regtest"
)

// TestAttestPinsTheVerifiedManifest: Attest checks the artifact a tag names, then attaches to that
// manifest by digest. A registry that answers the tag with another artifact after the check (here a
// middleware; a push to the tag in between does the same) does not get the verification attached to
// the other pack: it was, as the tag was resolved twice.
func TestAttestPinsTheVerifiedManifest(t *testing.T) {
	ctx := context.Background()
	var armed, swapped atomic.Int32
	reg := regtest.Start(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if armed.Load() == 1 && strings.HasSuffix(r.URL.Path, "/packs/stories/manifests/v1") && r.Method != http.MethodPut {
				if swapped.Add(1) > 1 { // the first answer (the check) is the tag's own
					r.URL.Path = strings.TrimSuffix(r.URL.Path, "v1") + "other"
				}
			}
			next.ServeHTTP(w, r)
		})
	})
	plain := registry.WithPlainHTTP(reg.Host)
	verified, other := t.TempDir(), t.TempDir()
	verifytest.BuildDir(t, verified)
	verifytest.BuildDirWith(t, other, func(w *pack.Weight) bool { w.Scales[0] *= 2; return true })
	for tag, dir := range map[string]string{"v1": verified, "other": other} {
		if _, err := registry.Push(ctx, dir, reg.Ref("packs/stories", tag), plain); err != nil {
			t.Fatal(err)
		}
	}
	res, err := verify.Dir(ctx, verified)
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(t.TempDir(), "board.key")
	if _, err := registry.GenerateKeyFiles(keyPath); err != nil {
		t.Fatal(err)
	}
	priv, err := registry.LoadPrivateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(1)
	if _, err := verify.Attest(ctx, reg.Ref("packs/stories", "v1"), res, plain, registry.WithSigner(priv)); err != nil {
		t.Fatal(err)
	}
	armed.Store(0)
	if swapped.Load() < 1 {
		t.Fatal("the middleware saw no request for the tag")
	}
	for tag, want := range map[string]int{"v1": 1, "other": 0} {
		d, err := registry.Describe(ctx, reg.Ref("packs/stories", tag), plain)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(verify.Verifications(d)); n != want {
			t.Errorf("%s: %d board verifications attached, want %d", tag, n, want)
		}
	}
}
