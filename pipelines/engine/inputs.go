package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"orkpipe/artifacts"
)

// RecordedInputs reads every target's build records under historyDir and returns, for each node key
// they hold key material for, the digests of that node's inputs (sorted; the action cache's records
// carry outputs only): what `cache gc --outdated` follows downstream (artifacts.GCOptions.Inputs).
// The history remembers the newest builds of each target (keepRecords), so a key it no longer holds
// is simply absent. It is a hint checked where it is read: a node whose material does not hash to
// its recorded key is left out, and a record file that cannot be read or decoded is left out and
// named in skipped (what it would have told stays unknown, and gc keeps what it cannot follow). A
// history directory that does not exist holds nothing.
func RecordedInputs(ctx context.Context, historyDir string) (inputs map[artifacts.Digest][]artifacts.Digest, skipped []error, err error) {
	inputs = map[artifacts.Digest][]artifacts.Digest{}
	targets, err := os.ReadDir(historyDir)
	if errors.Is(err, fs.ErrNotExist) {
		return inputs, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the build history: %w", err)
	}
	for _, t := range targets {
		if !t.IsDir() {
			continue // the hosts' and rates' files beside the targets' directories
		}
		dir := filepath.Join(historyDir, t.Name())
		names, err := recordNames(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the build history: %w", err)
		}
		for _, name := range names {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			p := filepath.Join(dir, name)
			if bad := addRecordInputs(p, inputs); bad != nil {
				skipped = append(skipped, bad)
			}
		}
	}
	return inputs, skipped, nil
}

// addRecordInputs adds the inputs of the nodes of the build record at p whose material hashes to
// their key; a file that does not read or decode, or a node whose material does not match its key,
// is the error returned (the record's other nodes are still added).
func addRecordInputs(p string, inputs map[artifacts.Digest][]artifacts.Digest) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("build record %s: %w", p, err)
	}
	var rec BuildRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("build record %s: %w", p, err)
	}
	var bad error
	for _, n := range rec.Nodes {
		if n.Material == nil || n.Key == "" {
			continue
		}
		key, kerr := artifacts.ParseDigest(n.Key)
		if _, seen := inputs[key]; seen && kerr == nil {
			continue // a newer record's node, checked there (a cached node recurs build after build)
		}
		got, merr := n.Material.Key()
		if kerr != nil || merr != nil || got != key {
			bad = fmt.Errorf("build record %s: node %q: its key material does not hash to its key %s (%v, %v)", p, n.ID, n.Key, kerr, merr)
			continue
		}
		ins := make([]artifacts.Digest, 0, len(n.Material.Inputs))
		for _, d := range n.Material.Inputs {
			ins = append(ins, d)
		}
		slices.SortFunc(ins, func(a, b artifacts.Digest) int { return bytes.Compare(a.Bytes(), b.Bytes()) })
		inputs[key] = slices.Compact(ins)
	}
	return bad
}
