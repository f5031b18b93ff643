package stages_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/internal/fixtures"
	"orkpipe/stages"
)

// TestVerifyLocalStorageIndependent: verify-local's output is the same for the stub emit-stub wrote
// (the pack-owned tensors are holes; the sha256 stage's record of it describes it) and for a copy of
// it without holes (as an executor may bring it back): no output may depend on how an input is
// stored.
func TestVerifyLocalStorageIndependent(t *testing.T) {
	model := fixtures.Synth(t, fixtures.MoE)
	in := map[string]string{}
	var names []string
	for e, path := range tiledExperts(t, model) {
		names = append(names, `"`+expertName(e)+`"`)
		in["e."+expertName(e)] = path
	}
	pk, err := runStage(t, "write-orkpack", `{"board":"rk3588","entries":[`+strings.Join(names, ",")+`],"max_entry_bytes":1048576}`, in)
	if err != nil {
		t.Fatal(err)
	}
	st, err := runStage(t, "emit-stub", `{"owned":["blk.1.ffn_down_exps.weight"]}`, map[string]string{"model": model})
	if err != nil {
		t.Fatal(err)
	}
	sparse := st["stub.gguf"]
	b, err := os.ReadFile(sparse)
	if err != nil {
		t.Fatal(err)
	}
	// The sha256 stage's record of the sparse stub (its holes hashed as zeros) describes the stub.
	sh, err := runStage(t, "sha256", `{}`, map[string]string{"file": sparse})
	if err != nil {
		t.Fatal(err)
	}
	var rec stages.SHA256Result
	if raw, err := os.ReadFile(sh["sha256.json"]); err != nil || json.Unmarshal(raw, &rec) != nil {
		t.Fatalf("sha256.json: %v %s", err, raw)
	}
	if sum := sha256.Sum256(b); rec.SHA256 != hex.EncodeToString(sum[:]) || rec.BLAKE3 != artifacts.SumBytes(b).String() || rec.Size != int64(len(b)) {
		t.Errorf("the stub's sha256.json %+v does not describe it (sha256 %x, %s, %d bytes)", rec, sum, artifacts.SumBytes(b), len(b))
	}
	dense := filepath.Join(t.TempDir(), "dense.gguf")
	if err := os.WriteFile(dense, b, 0o444); err != nil { // every byte written: no holes
		t.Fatal(err)
	}
	if bs, bd := blocks(t, sparse), blocks(t, dense); bs >= bd {
		t.Fatalf("the stub occupies %d blocks, its dense copy %d: want the stub sparse, the copy not", bs, bd)
	}
	var outs [][]byte
	for _, stub := range []string{sparse, dense} {
		v, err := runStage(t, "verify-local", `{"board":"rk3588"}`, map[string]string{"model": model, "pack": pk["pack"], "stub": stub})
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(v["verify.json"])
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b)
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Errorf("verify.json differs between the sparse stub and its dense copy:\n%s\n%s", outs[0], outs[1])
	}
	if !bytes.Contains(outs[0], []byte(`"stub_data_bytes": `)) {
		t.Errorf("verify.json does not report the stub's data bytes:\n%s", outs[0])
	}
}

func blocks(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}
