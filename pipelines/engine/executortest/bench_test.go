package executortest_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/engine/executortest"
	"orkpipe/stages"
)

// directExecutor is the local executor as it was before nodeexec: stages.Execute in a TempDir
// and AdoptFile of each output, with no result record. It is the baseline of the benchmark.
type directExecutor struct{ store *artifacts.Store }

func (d directExecutor) Execute(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, error) {
	tmp, err := d.store.TempDir(ctx)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	names, err := stages.Execute(ctx, req.Material, req.Inputs, req.Tools, tmp, nil)
	if err != nil {
		return nil, err
	}
	var outs []artifacts.NamedObject
	for _, n := range names {
		obj, err := d.store.AdoptFile(ctx, filepath.Join(tmp, n))
		if err != nil {
			return nil, err
		}
		outs = append(outs, artifacts.NamedObject{Name: n, Digest: obj.Digest, Size: obj.Size})
	}
	return outs, nil
}

// BenchmarkLocalExecutor runs a 64 MiB generate node through the local executor (nodeexec: run,
// hash into the result record, ingest) and through the direct baseline; report the ratio of the
// two ns/op. Each iteration uses a new seed so the store never already holds the output.
func BenchmarkLocalExecutor(b *testing.B) {
	const size = 64 << 20
	for _, bc := range []struct {
		name string
		new  func(*artifacts.Store) engine.Executor
	}{
		{"direct-baseline", func(s *artifacts.Store) engine.Executor { return directExecutor{s} }},
		{"nodeexec", func(s *artifacts.Store) engine.Executor { return engine.Local{Store: s} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			store, err := artifacts.OpenStore(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			x := bc.new(store)
			b.SetBytes(size)
			for i := 0; b.Loop(); i++ {
				req := executortest.Request(b, "demo-generate", `{"seed":`+strconv.Itoa(i)+`,"size":67108864}`, nil)
				if _, err := x.Execute(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
