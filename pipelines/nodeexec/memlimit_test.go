package nodeexec_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"testing"

	"orkpipe/pipelines/nodeexec"
	"orkpipe/stages"
)

// memLimitParams are the params of the "nodeexec-test-memlimit" stage: its declared peak memory.
type memLimitParams struct {
	Mem int64 `json:"mem"`
}

func init() {
	// "nodeexec-test-memlimit" declares Mem bytes and writes the Go memory limit it ran under.
	stages.Register(stages.Define("nodeexec-test-memlimit", 1, func(p memLimitParams) (stages.Spec, error) {
		return stages.Spec{Outputs: []string{"limit"}, PeakMemory: p.Mem}, nil
	}, func(_ context.Context, _ memLimitParams, req stages.Request) error {
		return os.WriteFile(req.Output("limit"), []byte(strconv.FormatInt(debug.SetMemoryLimit(-1), 10)), 0o644)
	}))
}

// TestRunMemoryLimit checks WithMemoryLimit: the stage runs under a Go memory limit equal to its
// declared peak, a lower limit already set is kept, the previous limit is back when Run returns,
// and without the option the limit is left alone.
func TestRunMemoryLimit(t *testing.T) {
	const declared = 3 << 30
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	for _, tc := range []struct {
		name      string
		on        bool
		prev      int64
		wantLimit int64
	}{
		{"no limit before", true, math.MaxInt64, declared},
		{"a higher limit before", true, 8 << 30, declared},
		{"a lower limit before", true, 1 << 30, 1 << 30},
		{"option off", false, math.MaxInt64, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(tc.prev)
			material, m, inDir := node(t, "nodeexec-test-memlimit", fmt.Sprintf(`{"mem":%d}`, declared), nil)
			key, _ := m.Key()
			out := filepath.Join(t.TempDir(), "out")
			if _, err := nodeexec.Run(context.Background(), material, inDir, out, nodeexec.WithKey(key), nodeexec.WithMemoryLimit(tc.on)); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(out, nodeexec.OutputsDir, "limit"))
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := strconv.ParseInt(string(b), 10, 64); got != tc.wantLimit {
				t.Errorf("the stage ran under a Go memory limit of %d, want %d", got, tc.wantLimit)
			}
			if got := debug.SetMemoryLimit(-1); got != tc.prev {
				t.Errorf("after Run the Go memory limit is %d, want the previous %d", got, tc.prev)
			}
		})
	}
}
