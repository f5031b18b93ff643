package boardhost

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"orkpipe/internal/testfiles"
)

// script returns the absolute path of a stand-in script in testdata.
func script(t testing.TB, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// tempInputs writes a pack (prefix + 3 MiB of random bytes, so hashing spans several reads)
// and a stub into a temp dir, and uses the shared evaluation text read-only.
func tempInputs(t testing.TB, packPrefix string) Inputs {
	t.Helper()
	dir := t.TempDir()
	body := make([]byte, 3<<20)
	if _, err := rand.Read(body); err != nil {
		t.Fatal(err)
	}
	pack := filepath.Join(dir, "model.orkpack")
	if err := os.WriteFile(pack, append([]byte(packPrefix), body...), 0o444); err != nil {
		t.Fatal(err)
	}
	stub := filepath.Join(dir, "model.gguf")
	if err := os.WriteFile(stub, body[:4096], 0o444); err != nil {
		t.Fatal(err)
	}
	return Inputs{Pack: pack, Stub: stub, Text: testfiles.Path(t, "stories-generated.txt")}
}

// writable makes a temp input writable again (the rewrite stand-ins need it; a real runtime
// running as the file's owner can do the same).
func writable(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
