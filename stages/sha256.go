package stages

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
)

// SHA256Params are the parameters of "sha256" (none): the sha256 of input "file", for provenance,
// computed by its own node so that a big subject (the pack, the stub) is hashed as soon as it exists,
// beside the nodes that read it, instead of on the build's serial tail.
type SHA256Params struct{}

// SHA256Result is the "sha256.json" output: the file's sha256, and its BLAKE3 and size as the store
// gave them, so that a reader can check it describes the file it binds.
type SHA256Result struct {
	SHA256 string `json:"sha256"`
	BLAKE3 string `json:"blake3"`
	Size   int64  `json:"size"`
}

func init() {
	Register(Define("sha256", 1, func(SHA256Params) (Spec, error) {
		return Spec{Inputs: []string{"file"}, Outputs: []string{"sha256.json"}, PeakMemory: 16 << 20}, nil
	}, runSHA256))
}

func runSHA256(ctx context.Context, _ SHA256Params, req Request) error {
	f := req.Inputs["file"]
	sum, err := sha256File(ctx, f.Path)
	if err != nil {
		return err
	}
	return writeSHA256Result(req.Output("sha256.json"), SHA256Result{SHA256: sum, BLAKE3: f.Digest.String(), Size: f.Size})
}

func writeSHA256Result(path string, r SHA256Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// readSHA256 reads a sha256 node's output at path and returns the sha256 of f, refusing one that
// describes another file (its BLAKE3 or size differ from f's).
func readSHA256(path string, f File) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var r SHA256Result
	if err := json.Unmarshal(b, &r); err != nil {
		return "", fmt.Errorf("sha256 record %s: %w", path, err)
	}
	if r.BLAKE3 != f.Digest.String() || r.Size != f.Size || len(r.SHA256) != 64 {
		return "", fmt.Errorf("sha256 record %s describes %s (%d bytes, sha256 %q), not %s (%s, %d bytes)", path, r.BLAKE3, r.Size, r.SHA256, f.Path, f.Digest, f.Size)
	}
	return r.SHA256, nil
}
