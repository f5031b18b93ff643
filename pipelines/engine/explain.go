package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"orkpipe/stages"
)

// Explanation says why the nodes of the last build of a target ran.
type Explanation struct {
	Target      string        `json:"target"`
	Build       time.Time     `json:"build"`
	Previous    *time.Time    `json:"previous,omitempty"` // nil: no earlier build recorded
	Nodes       []NodeChanges `json:"nodes"`              // every node that ran (executed or failed)
	Identical   [][]string    `json:"identical,omitempty"`
	NotComputed []string      `json:"not_computed,omitempty"` // nodes whose key was never computed
	Cached      int           `json:"cached"`                 // nodes served from the cache
	Ran         int           `json:"ran"`                    // nodes that executed or failed
}

// NodeChanges lists what changed in one node's key material since the previous build.
type NodeChanges struct {
	Node    string   `json:"node"`
	Stage   string   `json:"stage"`
	Key     string   `json:"key"`
	Outcome string   `json:"outcome"`
	Reason  string   `json:"reason"` // "new node", "key material changed", "same key: outputs were missing or corrupt", ...
	Changes []Change `json:"changes,omitempty"`
}

// Change is one difference of key material: Field is "stage", "version", "numerics",
// "params.<path>", "inputs.<name>" or "tools.<name>"; Old or New is empty when the field was absent.
type Change struct {
	Field string `json:"field"`
	Old   string `json:"old"`
	New   string `json:"new"`
}

// Explain compares the last recorded build of target with the one before.
func Explain(ctx context.Context, historyDir, target string) (*Explanation, error) {
	recs, err := History(ctx, historyDir, target, 2)
	if err != nil {
		return nil, err
	}
	last := recs[0]
	x := &Explanation{Target: target, Build: last.Time}
	prev := map[string]RecordedNode{}
	if len(recs) > 1 {
		t := recs[1].Time
		x.Previous = &t
		for _, n := range recs[1].Nodes {
			prev[n.ID] = n
		}
	}
	byKey := map[string][]string{}
	for _, n := range last.Nodes {
		if n.Material == nil {
			x.NotComputed = append(x.NotComputed, n.ID)
			continue
		}
		byKey[n.Key] = append(byKey[n.Key], n.ID)
		if n.Outcome == "cached" {
			x.Cached++
		}
		if n.Outcome != "executed" && n.Outcome != "failed" {
			continue
		}
		x.Ran++
		nc := NodeChanges{Node: n.ID, Stage: n.Stage, Key: n.Key, Outcome: n.Outcome}
		p, ok := prev[n.ID]
		switch {
		case x.Previous == nil:
			nc.Reason = "no earlier build recorded"
		case !ok:
			nc.Reason = "new node"
		case p.Material == nil:
			nc.Reason = "its key was not computed in the previous build (" + p.Outcome + ")"
		default:
			nc.Changes = DiffMaterial(*p.Material, *n.Material)
			if len(nc.Changes) == 0 {
				nc.Reason = "same key as the previous build: its outputs were missing or corrupt, or the previous run did not finish"
			} else {
				nc.Reason = "key material changed"
			}
		}
		x.Nodes = append(x.Nodes, nc)
	}
	for _, ids := range byKey {
		if len(ids) > 1 {
			x.Identical = append(x.Identical, ids)
		}
	}
	sort.Slice(x.Identical, func(i, j int) bool { return x.Identical[i][0] < x.Identical[j][0] })
	return x, nil
}

// DiffMaterial lists the differences between two key materials, field by field.
func DiffMaterial(old, cur stages.KeyMaterial) []Change {
	var out []Change
	if old.Stage != cur.Stage {
		out = append(out, Change{"stage", old.Stage, cur.Stage})
	}
	if old.Version != cur.Version {
		out = append(out, Change{"version", fmt.Sprint(old.Version), fmt.Sprint(cur.Version)})
	}
	if old.Numerics != cur.Numerics {
		out = append(out, Change{"numerics", old.Numerics, cur.Numerics})
	}
	out = append(out, diffMaps("params.", flattenJSON(old.Params), flattenJSON(cur.Params))...)
	ins := func(km stages.KeyMaterial) (map[string]string, map[string]string) {
		a, b := map[string]string{}, map[string]string{}
		for k, v := range km.Inputs {
			a[k] = v.String()
		}
		for k, v := range km.Tools {
			b[k] = v.String()
		}
		return a, b
	}
	oi, ot := ins(old)
	ci, ct := ins(cur)
	out = append(out, diffMaps("inputs.", oi, ci)...)
	out = append(out, diffMaps("tools.", ot, ct)...)
	return out
}

func diffMaps(prefix string, a, b map[string]string) []Change {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var out []Change
	for _, k := range sorted {
		if a[k] != b[k] {
			out = append(out, Change{prefix + k, a[k], b[k]})
		}
	}
	return out
}

// flattenJSON maps each leaf of a JSON value to its compact text, keyed by its dotted path
// (array elements as [i]). Unparseable input maps "" to the raw text.
func flattenJSON(raw []byte) map[string]string {
	out := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		out[""] = string(raw)
		return out
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch t := v.(type) {
		case map[string]any:
			if len(t) == 0 {
				out[path] = "{}"
			}
			for k, c := range t {
				p := k
				if path != "" {
					p = path + "." + k
				}
				walk(p, c)
			}
		case []any:
			if len(t) == 0 {
				out[path] = "[]"
			}
			for i, c := range t {
				walk(fmt.Sprintf("%s[%d]", path, i), c)
			}
		default:
			b, _ := json.Marshal(t)
			out[path] = string(b)
		}
	}
	walk("", v)
	return out
}
