package daggerexec_test

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"orkpipe/artifacts"
	"orkpipe/internal/testfiles"
	"orkpipe/pipelines/daggerexec"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/engine/executortest"
	"orkpipe/stages"
)

// countingEngine puts a proxy that counts the bytes sent to the engine between the dagger CLI and
// the engine at host (unix:// or tcp://) and returns the address to give the CLI instead. Other
// schemes (kube-pod://, docker-container://) cannot be proxied here: it returns host and nil.
func countingEngine(t *testing.T, host string) (string, *atomic.Int64) {
	t.Helper()
	network, addr, ok := strings.Cut(host, "://")
	if !ok || network != "unix" && network != "tcp" {
		return host, nil
	}
	sock := filepath.Join(t.TempDir(), "engine.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var sent atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				e, err := net.Dial(network, addr)
				if err != nil {
					return
				}
				defer e.Close()
				go func() {
					io.Copy(e, countingReader{c, &sent})
					if cw, ok := e.(interface{ CloseWrite() error }); ok {
						cw.CloseWrite()
					}
				}()
				io.Copy(c, e)
			}()
		}
	}()
	return "unix://" + sock, &sent
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// sparseStub writes a 2 GiB stub GGUF: stories260K's bytes with every other 64 KiB block left a
// hole (the tensors "the pack owns"; the header is whole), the rest of the 2 GiB a hole but for
// the model's last 4 KiB at the very end. It returns the file and the bytes of data written.
func sparseStub(t *testing.T, path string) (stages.File, int64) {
	t.Helper()
	const size, blk = 2 << 30, 64 << 10
	b, err := os.ReadFile(testfiles.Path(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	var data int64
	for off := int64(0); off < int64(len(b)); off += 2 * blk {
		n, err := f.WriteAt(b[off:min(off+blk, int64(len(b)))], off)
		if err != nil {
			t.Fatal(err)
		}
		data += int64(n)
	}
	if _, err := f.WriteAt(b[len(b)-4096:], size-4096); err != nil {
		t.Fatal(err)
	}
	return closeAndHash(t, f), data + 4096
}

// TestDaggerSparseInput runs a node whose input is a 2 GiB sparse stub (tokenize reads its
// header) on the engine, through a proxy that counts what is sent: the stub travels as its data
// (its tar form), not as 2 GiB, and the node's output is the in-process one. With
// ORKPIPE_LONG_TESTS=1 it also runs the node with the stub sent whole (holes as zeros, the
// executor before tar forms) and logs both figures.
func TestDaggerSparseInput(t *testing.T) {
	host := engineHost(t)
	if testing.Short() {
		testfiles.SkipShort(t, "2 GiB sparse stub skipped with -short")
	}
	proxy, sent := countingEngine(t, host)
	if sent == nil {
		testfiles.SkipOptional(t, "cannot count the bytes sent to engine %s (a unix:// or tcp:// engine address is needed)", host)
	}
	ctx := context.Background()
	stub, data := sparseStub(t, filepath.Join(t.TempDir(), "model.orkpack.gguf"))
	corpusPath := testfiles.Path(t, "tinystories_sample.txt")
	corpus, err := artifacts.HashPath(ctx, corpusPath)
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[string]stages.File{"model": stub, "corpus": {Path: corpusPath, Digest: corpus.Digest, Size: corpus.Size}}
	m := stages.KeyMaterial{Stage: "tokenize", Version: 2, Params: []byte(`{"corpus_name":"tinystories_sample.txt","ctx":64,"sequences":4}`),
		Inputs: map[string]artifacts.Digest{"model": stub.Digest, "corpus": corpus.Digest}, Numerics: executortest.Numerics(t)}
	key, err := m.Key()
	if err != nil {
		t.Fatal(err)
	}
	req := engine.ExecRequest{Key: key, Material: m, Inputs: inputs, Tools: map[string]stages.File{}}
	local, err := engine.Local{Store: executortest.OpenStore(t)}.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// run executes req through a new executor (a new store, a new session) and returns the bytes
	// sent to the engine meanwhile and the executor's counts.
	run := func(what string, opts ...daggerexec.Option) (int64, daggerexec.Stats) {
		t.Helper()
		opts = append([]daggerexec.Option{daggerexec.WithBinary(containerBinary(t)),
			daggerexec.WithRunnerHost(proxy), daggerexec.WithConnectTimeout(5 * time.Minute)}, opts...)
		before := sent.Load()
		start := time.Now()
		x, err := daggerexec.New(ctx, executortest.OpenStore(t), opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		got, err := x.Execute(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		n, st := sent.Load()-before, x.Stats()
		t.Logf("%s: 2 GiB stub (%d bytes of data) and a %d-byte corpus: %d bytes sent to the engine (session and node; %d bytes of files handed to it, %d inputs in tar form leaving out %d zero bytes) in %s; engine ran %d, cached %d",
			what, data, corpus.Size, n, st.Uploaded, st.TarInputs, st.HolesLeftOut, time.Since(start).Round(time.Millisecond), st.Ran, st.Cached)
		if !slices.Equal(got, local) {
			t.Errorf("%s: outputs through the engine %v, in process %v", what, got, local)
		}
		return n, st
	}
	n, st := run("tar form")
	bin, err := os.Stat(containerBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.TarInputs != 1 || st.Uploaded > bin.Size()+data+corpus.Size+64<<10 {
		t.Errorf("handed the engine %d bytes (%d inputs in tar form) for a %d-byte binary, %d bytes of stub data and a %d-byte corpus", st.Uploaded, st.TarInputs, bin.Size(), data, corpus.Size)
	}
	if n > st.Uploaded+1<<20 {
		t.Errorf("sent %d bytes to the engine for %d bytes of files: more than 1 MiB of overhead", n, st.Uploaded)
	}
	if testfiles.LongTests() {
		whole, _ := run("whole (holes as zeros)", daggerexec.WithWholeInputs())
		t.Logf("bytes sent to the engine: whole %d, tar form %d (%.1fx fewer)", whole, n, float64(whole)/float64(n))
	}
}
