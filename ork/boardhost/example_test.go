package boardhost_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"orkpipe/ork/boardhost"
)

// Example shows how "orkpipe verify --run" composes a report: other packages' checks are
// appended by the caller, then the fingerprint and the guarded run.
func Example() {
	dir, _ := os.MkdirTemp("", "boardhost-example")
	defer os.RemoveAll(dir)
	pack, stub := filepath.Join(dir, "m.orkpack"), filepath.Join(dir, "m.gguf")
	os.WriteFile(pack, []byte("ORKPACK-Q8 example pack"), 0o444)
	os.WriteFile(stub, []byte("GGUF example stub"), 0o444)
	runtime, _ := filepath.Abs("testdata/fake-llama-perplexity-good.sh") // stand-in for llama-perplexity
	ctx := context.Background()

	var r boardhost.Report
	r.Add("integrity", nil, "every entry's BLAKE3 verified") // e.g. from ork/pack

	f, err := boardhost.Collect(ctx, boardhost.WithProgram(runtime))
	if err != nil {
		fmt.Println(err)
		return
	}
	r.SetFingerprint(f)

	rec, err := boardhost.Run(ctx, runtime+" -m {stub} --ork-pack {pack}", boardhost.Inputs{Pack: pack, Stub: stub})
	r.SetRun(rec, err)

	fmt.Println("ok:", r.OK())
	for _, c := range r.Checks {
		fmt.Println(c.Name, c.OK)
	}
	fmt.Printf("PPL %.4f over %d chunks\n", rec.PPL, rec.Chunks)
	// Output:
	// ok: true
	// integrity true
	// fingerprint true
	// inputs-unchanged true
	// run true
	// PPL 2.4894 over 39 chunks
}
