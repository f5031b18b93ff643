package procexec_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/engine/executortest"
	"orkpipe/pipelines/procexec"
)

// The test binary is also the child: with PROCEXEC_TEST_CHILD set it serves the local executor on
// the store PROCEXEC_TEST_STORE names (or, for "refuse", refuses to start; for "garble", says hello
// and then answers every request with a line that is not JSON).
func TestMain(m *testing.M) {
	switch os.Getenv("PROCEXEC_TEST_CHILD") {
	case "":
		os.Exit(m.Run())
	case "serve":
		store, err := artifacts.OpenStore(os.Getenv("PROCEXEC_TEST_STORE"))
		if err != nil {
			procexec.Refuse(os.Stdout, err)
			os.Exit(1)
		}
		x := engine.Local{Store: store}
		hello := procexec.Hello{Program: "procexec.test", Orkpipe: artifacts.OrkpipeBuild{Version: "test"}}
		if err := procexec.Serve(context.Background(), os.Stdin, os.Stdout, hello, localProvenance{x}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "refuse":
		procexec.Refuse(os.Stdout, fmt.Errorf("no engine here: %w", artifacts.ErrNotFound))
		os.Exit(1)
	case "garble":
		procexec.Serve(context.Background(), strings.NewReader(""), os.Stdout, procexec.Hello{Program: "garble"}, nil)
		buf := make([]byte, 1<<16)
		for {
			if _, err := os.Stdin.Read(buf); err != nil {
				os.Exit(0)
			}
			os.Stdout.WriteString("this is not a reply\n")
		}
	case "old":
		os.Stdout.WriteString(`{"hello":{"protocol":0,"program":"old"}}` + "\n")
		os.Stdin.Read(make([]byte, 1))
		os.Exit(0)
	}
	os.Exit(2)
}

// localProvenance is engine.Local with the provenance of its runs (Local records none itself):
// this process's, as a remote executor reports the run's host.
type localProvenance struct{ engine.Local }

func (l localProvenance) ExecuteProvenance(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, artifacts.Provenance, error) {
	outs, err := l.Execute(ctx, req)
	host, _ := os.Hostname()
	return outs, artifacts.Provenance{Host: "child of " + host, Orkpipe: artifacts.OrkpipeBuild{Version: "test"}}, err
}

// child returns the command that runs this test binary as a child of the given kind.
func child(t *testing.T, kind, storeDir string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "PROCEXEC_TEST_CHILD="+kind, "PROCEXEC_TEST_STORE="+storeDir)
	cmd.Stderr = os.Stderr
	return cmd
}

func start(t *testing.T, kind, storeDir string) *procexec.Client {
	t.Helper()
	c, err := procexec.Start(context.Background(), child(t, kind, storeDir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// TestClientConforms runs the executor conformance suite through a child process serving the
// local executor on the same store: outputs byte-identical to an in-process run, failures and
// missing inputs reported with their messages, cancellation prompt and clean.
func TestClientConforms(t *testing.T) {
	executortest.RunForwarding(t, func(t *testing.T, store *artifacts.Store, _ func(string) error) engine.Executor {
		return start(t, "serve", store.Dir())
	})
}

// TestClientConcurrent: nodes sent at once from several goroutines each get their own answer.
func TestClientConcurrent(t *testing.T) {
	store := executortest.OpenStore(t)
	c := start(t, "serve", store.Dir())
	if h := c.Hello(); h.Protocol != procexec.Protocol || h.Program != "procexec.test" {
		t.Errorf("hello %+v", h)
	}
	nodes := executortest.Nodes(t)
	errs := make(chan error, 4*len(nodes))
	for range 4 {
		for _, n := range nodes {
			go func() {
				outs, prov, err := c.ExecuteProvenance(context.Background(), n.Req)
				switch {
				case err != nil:
					errs <- fmt.Errorf("node %s: %w", n.Name, err)
				case fmt.Sprint(outs) != fmt.Sprint(n.Want):
					errs <- fmt.Errorf("node %s: outputs %v, want %v", n.Name, outs, n.Want)
				case !strings.HasPrefix(prov.Host, "child of "):
					errs <- fmt.Errorf("node %s: provenance %+v, want the child's", n.Name, prov)
				default:
					errs <- nil
				}
			}()
		}
	}
	for range 4 * len(nodes) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestChildFailures: a child that refuses to start, speaks another protocol version, breaks the
// protocol or exits is an error wrapping ErrChild (a refusal keeps its message and sentinels),
// never a hang.
func TestChildFailures(t *testing.T) {
	store := executortest.OpenStore(t)
	ctx := context.Background()
	_, err := procexec.Start(ctx, child(t, "refuse", store.Dir()))
	if !errors.Is(err, procexec.ErrChild) || !errors.Is(err, artifacts.ErrNotFound) || !strings.Contains(err.Error(), "no engine here") {
		t.Errorf("refusing child: %v", err)
	}
	_, err = procexec.Start(ctx, child(t, "old", store.Dir()))
	if !errors.Is(err, procexec.ErrChild) || !strings.Contains(err.Error(), "protocol 0") {
		t.Errorf("child of protocol 0: %v", err)
	}
	cmd := child(t, "serve", store.Dir())
	cmd.Args = append(cmd.Args, "-test.count=1")
	cmd.Env = append(cmd.Env, "PROCEXEC_TEST_CHILD=nothing") // the last one wins: exits 2 at once
	_, err = procexec.Start(ctx, cmd)
	if !errors.Is(err, procexec.ErrChild) || !strings.Contains(err.Error(), "before its hello") {
		t.Errorf("child exiting at once: %v", err)
	}
	sleeper := exec.Command("sleep", "60")
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = procexec.Start(tctx, sleeper)
	if !errors.Is(err, procexec.ErrChild) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("silent child: %v", err)
	}
	c, err := procexec.Start(ctx, child(t, "garble", store.Dir()))
	if err != nil {
		t.Fatal(err)
	}
	n := executortest.Nodes(t)[0]
	for i := range 2 {
		if _, err := c.Execute(ctx, n.Req); !errors.Is(err, procexec.ErrChild) {
			t.Errorf("request %d to a garbling child: %v", i, err)
		}
	}
	if err := c.Close(); !errors.Is(err, procexec.ErrChild) || !strings.Contains(err.Error(), "reading a reply") {
		t.Errorf("Close after garbling: %v", err)
	}
}

// TestServeRejectsBadRequests: Serve ends with ErrChild on a request it cannot read, after the
// hello.
func TestServeRejectsBadRequests(t *testing.T) {
	for _, line := range []string{`not json`, `{"id":0,"cancel":true}`, `{"id":3}`, `{"id":3,"cancel":true,"exec":{}}`} {
		var out bytes.Buffer
		err := procexec.Serve(context.Background(), strings.NewReader(line+"\n"), &out, procexec.Hello{}, nil)
		if !errors.Is(err, procexec.ErrChild) || !strings.HasPrefix(out.String(), `{"hello":{"protocol":1`) {
			t.Errorf("%s: err %v, output %q", line, err, out.String())
		}
	}
}

// TestCloseCancelsRunningNodes: closing the session while a node runs cancels it in the child,
// which then exits; the node's call returns an error and Close returns promptly.
func TestCloseCancelsRunningNodes(t *testing.T) {
	store := executortest.OpenStore(t)
	c, err := procexec.Start(context.Background(), child(t, "serve", store.Dir()))
	if err != nil {
		t.Fatal(err)
	}
	req := executortest.Request(t, "demo-generate", `{"seed":7,"size":4294967296}`, nil) // 4 GiB: minutes
	done := make(chan error, 1)
	go func() {
		_, err := c.Execute(context.Background(), req)
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not return within a minute")
	}
	if err := <-done; err == nil {
		t.Error("the node running when the session closed succeeded")
	}
}
