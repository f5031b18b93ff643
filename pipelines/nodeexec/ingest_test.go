package nodeexec_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/pipelines/nodeexec"
)

func TestIngest(t *testing.T) {
	ctx := context.Background()
	material, m, inDir := node(t, "demo-join", `{}`, map[string]string{"a": "left ", "b": "right"})
	key, _ := m.Key()
	flip := func(name string) func(string) error {
		return func(out string) error {
			p := filepath.Join(out, nodeexec.OutputsDir, name)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[0] ^= 1
			return os.WriteFile(p, b, 0o644)
		}
	}
	for _, tc := range []struct {
		name     string
		damage   func(out string) error
		precheck bool
		wantIs   error
		want     string
	}{
		{"intact", nil, true, nil, ""},
		{"intact, adopt only", nil, false, nil, ""},
		{"flipped byte, precheck", flip("data"), true, nodeexec.ErrExportMismatch, "hashes to"},
		{"flipped byte, adopt only", flip("manifest.json"), false, nodeexec.ErrExportMismatch, "stored as"},
		{"truncated", func(out string) error { return os.Truncate(filepath.Join(out, nodeexec.OutputsDir, "data"), 3) }, false, nodeexec.ErrExportMismatch, "3 bytes"},
		{"missing output", func(out string) error { return os.Remove(filepath.Join(out, nodeexec.OutputsDir, "data")) }, false, nodeexec.ErrExportMismatch, "holds"},
		{"extra file", func(out string) error {
			return os.WriteFile(filepath.Join(out, nodeexec.OutputsDir, "stray"), nil, 0o644)
		}, true, nodeexec.ErrExportMismatch, "stray"},
		{"no record", func(out string) error { return os.Remove(filepath.Join(out, nodeexec.ResultFile)) }, true, nodeexec.ErrBadResult, nodeexec.ResultFile},
		{"record of another node", func(out string) error {
			p := filepath.Join(out, nodeexec.ResultFile)
			b, _ := os.ReadFile(p)
			return os.WriteFile(p, []byte(strings.Replace(string(b), key.String(), artifacts.SumBytes(nil).String(), 1)), 0o644)
		}, true, nodeexec.ErrBadResult, "want " + key.String()},
		{"symlink instead of a file", func(out string) error {
			p := filepath.Join(out, nodeexec.OutputsDir, "data")
			real := filepath.Join(out, "data.real")
			os.Rename(p, real)
			return os.Symlink(real, p)
		}, true, nodeexec.ErrExportMismatch, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, err := artifacts.OpenStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			tmp, err := store.TempDir(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(tmp, "out")
			res, err := nodeexec.Run(ctx, material, inDir, out)
			if err != nil {
				t.Fatal(err)
			}
			if tc.damage != nil {
				if err := tc.damage(out); err != nil {
					t.Fatal(err)
				}
			}
			outs, _, err := nodeexec.Ingest(ctx, store, out, key, m, nodeexec.IngestOptions{Precheck: tc.precheck})
			if tc.wantIs == nil {
				if err != nil || len(outs) != 2 || outs[0] != res.Outputs[0] {
					t.Fatalf("Ingest = %v, %v", outs, err)
				}
				if err := store.Verify(ctx, outs[0].Digest); err != nil {
					t.Errorf("stored output: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.wantIs) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %v mentioning %q", err, tc.wantIs, tc.want)
			}
			if tc.precheck {
				for _, o := range res.Outputs {
					if _, err := store.Stat(ctx, o.Digest); !errors.Is(err, artifacts.ErrNotFound) {
						t.Errorf("output %s stored although the export was rejected before adoption: %v", o.Name, err)
					}
				}
			}
		})
	}
}

// countingAdopter records which adoption each output took.
type countingAdopter struct {
	*artifacts.Store
	hashed map[string]artifacts.Digest // file name -> the stamp's digest
	plain  []string
}

func (c *countingAdopter) AdoptFile(ctx context.Context, path string) (artifacts.Object, error) {
	c.plain = append(c.plain, filepath.Base(path))
	return c.Store.AdoptFile(ctx, path)
}

func (c *countingAdopter) AdoptHashed(ctx context.Context, path string, h artifacts.HashedFile) (artifacts.Object, error) {
	c.hashed[filepath.Base(path)] = h.Digest
	return c.Store.AdoptHashed(ctx, path, h)
}

// TestIngestHandsOnStamps: the stamps of Run's hashes (IngestOptions.Hashed), or with Precheck those
// of the precheck's own hashes, go to AdoptHashed for every output whose stamp names the recorded
// digest; without either every output is adopted with AdoptFile.
func TestIngestHandsOnStamps(t *testing.T) {
	ctx := context.Background()
	material, m, inDir := node(t, "demo-join", `{}`, map[string]string{"a": "left ", "b": "right"})
	key, _ := m.Key()
	for _, tc := range []struct {
		name      string
		precheck  bool
		runStamps bool
		wantPlain int
	}{
		{"run's stamps", false, true, 0},
		{"precheck's stamps", true, false, 0},
		{"no stamps", false, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, err := artifacts.OpenStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			tmp, err := store.TempDir(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(tmp, "out")
			res, err := nodeexec.Run(ctx, material, inDir, out)
			if err != nil {
				t.Fatal(err)
			}
			opts := nodeexec.IngestOptions{Precheck: tc.precheck}
			if tc.runStamps {
				opts.Hashed = res.Hashed
			}
			c := &countingAdopter{Store: store, hashed: map[string]artifacts.Digest{}}
			outs, _, err := nodeexec.Ingest(ctx, c, out, key, m, opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.plain) != tc.wantPlain || len(c.hashed) != len(outs)-tc.wantPlain {
				t.Fatalf("AdoptFile for %v, AdoptHashed for %v", c.plain, c.hashed)
			}
			for _, o := range outs {
				if d, ok := c.hashed[o.Name]; ok && d != o.Digest {
					t.Errorf("%s adopted with a stamp of %s, recorded %s", o.Name, d, o.Digest)
				}
			}
		})
	}
}
