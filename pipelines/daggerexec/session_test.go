package daggerexec_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"

	"orkpipe/artifacts"
	"orkpipe/pipelines/daggerexec"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/engine/executortest"
	"orkpipe/stages"
)

// fakeSession is a test double of a `dagger run` session (the suite against a real engine is
// conformance_test.go): it answers version, host.file and directory.withFile queries, records the
// container query and fails its exec like the engine does, with an EXEC_ERROR carrying the
// container's stderr.
type fakeSession struct {
	mu      sync.Mutex
	queries []string
	stderr  string
}

func (f *fakeSession) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if user, _, _ := r.BasicAuth(); user != "test-token" {
		http.Error(w, "bad token", http.StatusUnauthorized)
		return
	}
	var req struct {
		Query string `json:"query"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.queries = append(f.queries, req.Query)
	n := len(f.queries)
	f.mu.Unlock()
	var resp any
	switch {
	case strings.Contains(req.Query, "container"):
		resp = map[string]any{"data": nil, "errors": []any{map[string]any{
			"message":    `process "/orkpipe node exec" did not complete successfully: exit code: 1`,
			"extensions": map[string]any{"_type": "EXEC_ERROR", "exitCode": 1, "stdout": "", "stderr": f.stderr},
		}}}
	case strings.Contains(req.Query, "directory{withFile"):
		resp = map[string]any{"data": map[string]any{"directory": map[string]any{"withFile": map[string]any{"id": fmt.Sprintf("DIR-%d", n)}}}}
	case strings.Contains(req.Query, "host"):
		resp = map[string]any{"data": map[string]any{"host": map[string]any{"file": map[string]any{"id": fmt.Sprintf("FILE-%d", n)}}}}
	case strings.Contains(req.Query, "version"):
		resp = map[string]any{"data": map[string]any{"version": daggerexec.EngineVersion}}
	default:
		http.Error(w, "unexpected query "+req.Query, http.StatusBadRequest)
		return
	}
	json.NewEncoder(w).Encode(resp)
}

// startFakeSession serves a fakeSession whose execs fail with stderr, as the `dagger run` session
// of this test.
func startFakeSession(t *testing.T, stderr string) *fakeSession {
	t.Helper()
	fake := &fakeSession{stderr: stderr}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	if _, err := strconv.Atoi(port); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DAGGER_SESSION_PORT", port)
	t.Setenv("DAGGER_SESSION_TOKEN", "test-token")
	return fake
}

func TestExecFailureReportsStderrTail(t *testing.T) {
	noEngineEnv(t)
	var lines []string
	for i := 1; i <= 30; i++ {
		lines = append(lines, fmt.Sprintf("stderr line %d", i))
	}
	lines = append(lines, `orkpipe: stage "demo-rotate": field "bits": 9, want 1..7`)
	fake := startFakeSession(t, strings.Join(lines, "\n")+"\n")

	ctx := context.Background()
	store := executortest.OpenStore(t)
	x, err := daggerexec.New(ctx, store, daggerexec.WithBinary(goBinary(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	in := stages.File{Path: goBinary(t)}
	obj, err := artifacts.HashPath(ctx, in.Path)
	if err != nil {
		t.Fatal(err)
	}
	in.Digest, in.Size = obj.Digest, obj.Size
	m := stages.KeyMaterial{Stage: "demo-rotate", Version: 1, Params: []byte(`{"bits":9}`), Inputs: map[string]artifacts.Digest{"in": in.Digest},
		Numerics: executortest.Numerics(t)}
	key, _ := m.Key()
	_, err = x.Execute(ctx, engine.ExecRequest{Key: key, Material: m, Inputs: map[string]stages.File{"in": in}})
	if err == nil {
		t.Fatal("a failing exec was reported as a success")
	}
	msg := err.Error()
	for _, want := range []string{"exit 1", `field "bits": 9, want 1..7`, "stderr line 30", "stderr line 12", key.String()} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not contain %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "stderr line 11\n") {
		t.Errorf("error holds more than the stderr tail:\n%s", msg)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	var ctr string
	for _, q := range fake.queries {
		if strings.Contains(q, "container") {
			ctr = q
		}
	}
	// Every upload is a store object, named by its digest (content-addressed: the engine's
	// cache key of an uploaded file is its content and name, not its host path). Here the binary
	// and the input are the same file, outside the store: ingested once.
	want := fmt.Sprintf(`file(path:"%s")`, filepath.Join(store.Dir(), "objects", in.Digest.Hex()[:2], in.Digest.Hex()))
	if all := strings.Join(fake.queries, "\n"); !strings.Contains(all, want) || strings.Contains(all, in.Path) {
		t.Errorf("the binary and the input were not uploaded as the store object (%s):\n%s", want, all)
	}
	// The binary is mounted from a directory holding it as "orkpipe", mode 0555; each input from
	// a directory holding it under its digest, at /node/in/<hex> (nodeexec reads <hex>/<hex>).
	var binDir, inDir bool
	for _, q := range fake.queries {
		binDir = binDir || hasCall(q, "withFile", `path:"orkpipe"`, `permissions:365`, `source:"FILE-`)
		inDir = inDir || hasCall(q, "withFile", `path:"`+in.Digest.Hex()+`"`, `source:"FILE-`)
	}
	if !binDir || !inDir {
		t.Errorf("binary directory %v, input directory %v:\n%s", binDir, inDir, strings.Join(fake.queries, "\n"))
	}
	// Arguments of one field come in any order: check them one by one.
	hex := in.Digest.Hex()
	for _, want := range []struct {
		field string
		args  []string
	}{
		{"container", []string{`platform:"linux/amd64"`}},
		{"withNewFile", []string{`path:"/node/material.json"`, `contents:"{\"inputs\":{\"in\":\"` + in.Digest.String()}},
		{"withMountedDirectory", []string{`path:"/node/bin"`, `source:"DIR-`}},
		{"withMountedDirectory", []string{`path:"/node/in/` + hex + `"`, `source:"DIR-`}},
		{"withExec", []string{`args:["/node/bin/orkpipe","node","exec","--key","` + key.String() + `","--material","/node/material.json","--inputs","/node/in","--scratch","/node/scratch","--output","/node/out"]`}},
		{"directory", []string{`path:"/node/out"`}},
		{"export", []string{`path:"`}},
	} {
		if !hasCall(ctr, want.field, want.args...) {
			t.Errorf("container query lacks %s(%s):\n%s", want.field, strings.Join(want.args, ", "), ctr)
		}
	}
}

// hasCall reports whether query selects field with (at least) args, in any order.
func hasCall(query, field string, args ...string) bool {
	for off := 0; ; {
		i := strings.Index(query[off:], field+"(")
		if i < 0 {
			return false
		}
		start := off + i
		off = start + len(field) + 1
		if start > 0 && unicode.IsLetter(rune(query[start-1])) {
			continue // a longer field name ending in field
		}
		call, _, _ := strings.Cut(query[off:], "){")
		call, _, _ = strings.Cut(call, ")}")
		ok := true
		for _, a := range args {
			ok = ok && strings.Contains(call, a)
		}
		if ok {
			return true
		}
	}
}
