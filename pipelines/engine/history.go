package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"orkpipe/stages"
)

// keepRecords is how many build records are kept per target.
const keepRecords = 20

// BuildRecord is what one build of a target leaves for explain: the key material of every node
// whose key was computed. Stored as JSON at <history dir>/<url.PathEscape(target)>/<unix ns>-<pid>.json.
type BuildRecord struct {
	Target string         `json:"target"`
	Time   time.Time      `json:"time"`
	Nodes  []RecordedNode `json:"nodes"`
}

// RecordedNode is one node of a BuildRecord.
type RecordedNode struct {
	ID       string              `json:"node"`
	Stage    string              `json:"stage"`
	Key      string              `json:"key,omitempty"`
	Outcome  string              `json:"outcome"` // executed, cached, failed, skipped
	SameAs   string              `json:"same_as,omitempty"`
	Material *stages.KeyMaterial `json:"material,omitempty"`
}

// HistoryDir is the default history directory of a store directory.
func HistoryDir(storeDir string) string { return filepath.Join(storeDir, "history") }

func (e *Engine) record(target string, ps *pass, res *Result, start time.Time) error {
	var nodes []byte
	for i, st := range ps.states {
		nr := res.Nodes[i]
		rn := RecordedNode{ID: nr.ID, Stage: nr.Stage, Outcome: nr.Outcome.String(), SameAs: nr.SameAs, Material: st.material}
		if !nr.Key.IsZero() {
			rn.Key = nr.Key.String()
		}
		b, err := json.Marshal(rn)
		if err != nil {
			return err
		}
		if i > 0 {
			nodes = append(nodes, ',')
		}
		nodes = append(nodes, b...)
	}
	return e.writeRecord(target, start, func(w io.Writer) error { _, err := w.Write(nodes); return err })
}

// writeRecord writes the BuildRecord of target's build started at start, its nodes written by
// nodes as their RecordedNodes' JSON separated by commas, and keeps the newest keepRecords
// records. If nodes fails, no record is written.
func (e *Engine) writeRecord(target string, start time.Time, nodes func(w io.Writer) error) error {
	head, err := json.Marshal(struct {
		Target string    `json:"target"`
		Time   time.Time `json:"time"`
	}{target, start.UTC()})
	if err != nil {
		return err
	}
	head = append(head[:len(head)-1], `,"nodes":[`...)
	dir := filepath.Join(e.cfg.historyDir, url.PathEscape(target))
	name := fmt.Sprintf("%020d-%d.json", start.UnixNano(), os.Getpid())
	err = writeFileAtomicFunc(filepath.Join(dir, name), func(w io.Writer) error {
		if _, err := w.Write(head); err != nil {
			return err
		}
		if err := nodes(w); err != nil {
			return err
		}
		_, err := w.Write([]byte(`]}`))
		return err
	})
	if err != nil {
		return err
	}
	names, err := recordNames(dir)
	if err != nil {
		return err
	}
	for _, old := range names[min(len(names), keepRecords):] {
		os.Remove(filepath.Join(dir, old))
	}
	return nil
}

// recordNames lists the build records of one target directory, newest first.
func recordNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	return names, nil
}

// History returns up to n recorded builds of target, newest first. No record at all is an error
// wrapping ErrNoHistory.
func History(ctx context.Context, historyDir, target string, n int) ([]BuildRecord, error) {
	dir := filepath.Join(historyDir, url.PathEscape(target))
	names, err := recordNames(dir)
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(names) == 0 {
		return nil, fmt.Errorf("%w of target %q in %s: build it first", ErrNoHistory, target, historyDir)
	}
	if err != nil {
		return nil, err
	}
	var out []BuildRecord
	for _, name := range names[:min(n, len(names))] {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var rec BuildRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("build record %s: %w", p, err)
		}
		out = append(out, rec)
	}
	return out, nil
}
