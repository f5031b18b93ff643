package progress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"orkpipe/internal/flock"
	"orkpipe/pipelines/engine"
)

// KindCost is what the nodes of one kind cost in a build: the mean of their shares of the wall time
// (ETA's doc), over the nodes of the kind that finished.
type KindCost struct {
	Stage    string        // the nodes' stage
	Kind     string        // their ids with every run of digits written '#' (finalize:blk.#.ffn_down.weight)
	Mean     time.Duration // the mean share
	Nodes    int           // how many finished
	Measured time.Time     // when the build that measured them started
	// Tokens is the work the mean is proportional to, for a kind whose cost grows with it (the
	// calibration tokens, sequences × ctx, of the build that measured a calibrate or propagate
	// kind: StampTokens); 0 for the others.
	Tokens int64
}

// StampTokens returns costs with Tokens set to tokens on the kinds of stages: what a build with
// tokens of the work those stages' costs grow with measured.
func StampTokens(costs []KindCost, tokens int64, stages ...string) []KindCost {
	out := slices.Clone(costs)
	for i := range out {
		if slices.Contains(stages, out[i].Stage) {
			out[i].Tokens = tokens
		}
	}
	return out
}

// ScaleTokens returns costs as a build with tokens of that work should expect them: each kind
// measured with Tokens > 0 of it has its mean scaled by tokens/Tokens (at most maxMeanMS) and Tokens
// set to tokens; the other kinds, and all of them when tokens is 0, are as they were.
func ScaleTokens(costs []KindCost, tokens int64) []KindCost {
	out := slices.Clone(costs)
	for i, k := range out {
		if k.Tokens > 0 && tokens > 0 && k.Tokens != tokens {
			out[i].Mean = time.Duration(min(float64(k.Mean)*float64(tokens)/float64(k.Tokens), maxMeanMS*float64(time.Millisecond)))
			out[i].Tokens = tokens
		}
	}
	return out
}

// Costs returns what the build has measured so far: one KindCost per kind with a finished node,
// stamped measured, sorted by stage and kind.
func (t *ETA) Costs(measured time.Time) []KindCost {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]KindCost, 0, len(t.classes))
	for _, c := range t.classes {
		out = append(out, KindCost{Stage: c.stage, Kind: c.kind, Mean: c.mean(), Nodes: c.n, Measured: measured.UTC()})
	}
	sortCosts(out)
	return out
}

// Prime gives the ETA an earlier build's costs (ReadCosts), the estimate for kinds this build has not
// timed yet. Call it before the first event; a later call replaces the earlier one's costs.
func (t *ETA) Prime(costs []KindCost) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prior, t.priorStages = map[string]*cost{}, map[string]*cost{}
	t.scaleNow, t.scaleThen = 0, 0
	type sum struct{ share, n float64 }
	stages := map[string]*sum{}
	for _, k := range costs {
		if k.Nodes < 1 || k.Mean < 0 {
			continue
		}
		t.prior[k.Stage+" "+k.Kind] = &cost{stage: k.Stage, kind: k.Kind, share: k.Mean, n: 1}
		if stages[k.Stage] == nil {
			stages[k.Stage] = &sum{}
		}
		stages[k.Stage].share += float64(k.Mean) * float64(k.Nodes)
		stages[k.Stage].n += float64(k.Nodes)
	}
	for stage, s := range stages { // the stage's mean over its nodes, the kinds weighted by their counts
		t.priorStages[stage] = &cost{stage: stage, share: time.Duration(s.share / s.n), n: 1}
	}
}

// MergeCosts returns old with every kind that now measured replaced by now's cost, sorted by stage and
// kind: what a target's builds have measured, each kind as it last ran.
func MergeCosts(old, now []KindCost) []KindCost {
	byKey := map[[2]string]KindCost{}
	for _, k := range old {
		byKey[[2]string{k.Stage, k.Kind}] = k
	}
	for _, k := range now {
		byKey[[2]string{k.Stage, k.Kind}] = k
	}
	out := make([]KindCost, 0, len(byKey))
	for _, k := range byKey {
		out = append(out, k)
	}
	sortCosts(out)
	return out
}

func sortCosts(c []KindCost) {
	sort.Slice(c, func(i, j int) bool {
		if c[i].Stage != c[j].Stage {
			return c[i].Stage < c[j].Stage
		}
		return c[i].Kind < c[j].Kind
	})
}

// CostsFile is where the costs of target's builds are kept in a history directory
// (engine.HistoryDir): beside the target's build records, as
// <history dir>/<url.PathEscape(target)>/costs.
func CostsFile(historyDir, target string) string {
	return filepath.Join(historyDir, url.PathEscape(target), "costs")
}

// The costs file's format: a target's costs per source (what the costs depend on most, e.g. the
// model's size or shape: the caller names it), the source of the newest build first, at most
// keepSources of them:
//
//	{"version":1,"target":T,"sources":[{"source":S,"kinds":[{"stage":S,"kind":K,"mean_ms":M,"nodes":N,"measured":RFC3339,"tokens":W}, ...]}, ...]}
//
// (tokens, KindCost.Tokens, omitted when 0; a file written before it existed reads as 0.)
const (
	costsVersion = 1
	keepSources  = 8
	// maxMeanMS bounds a kind's mean_ms (about 34 years) so that it converts to a time.Duration.
	maxMeanMS = 1 << 40
)

type costsJSON struct {
	Version int          `json:"version"`
	Target  string       `json:"target"`
	Sources []sourceJSON `json:"sources"`
}

type sourceJSON struct {
	Source string     `json:"source"`
	Kinds  []kindJSON `json:"kinds"`
}

type kindJSON struct {
	Stage    string    `json:"stage"`
	Kind     string    `json:"kind"`
	MeanMS   int64     `json:"mean_ms"`
	Nodes    int       `json:"nodes"`
	Measured time.Time `json:"measured"`
	Tokens   int64     `json:"tokens,omitempty"`
}

// ReadCosts returns the costs kept in the costs file at path for target's builds of source: none
// (and no error) when the file is missing or has no entry for source. A damaged file, or one of
// another format version or target, is an error naming the file and what is wrong.
func ReadCosts(path, target, source string) ([]KindCost, error) {
	f, err := readCostsFile(path, target)
	if err != nil || f == nil {
		return nil, err
	}
	for _, src := range f.Sources {
		if src.Source == source {
			return fromJSON(src.Kinds), nil
		}
	}
	return nil, nil
}

// readCostsFile reads and checks the costs file at path; nil (and no error) when it is missing.
func readCostsFile(path, target string) (*costsJSON, error) {
	var f costsJSON
	if found, err := readJSONFile(path, "build costs", &f); !found || err != nil {
		return nil, err
	}
	if f.Version != costsVersion {
		return nil, fmt.Errorf("build costs %s: version %d, want %d", path, f.Version, costsVersion)
	}
	if f.Target != target {
		return nil, fmt.Errorf("build costs %s: target %q, want %q", path, f.Target, target)
	}
	seen := map[string]bool{}
	for i, src := range f.Sources {
		if seen[src.Source] {
			return nil, fmt.Errorf("build costs %s: sources[%d]: source %q listed twice", path, i, src.Source)
		}
		seen[src.Source] = true
		kinds := map[[2]string]bool{}
		for j, k := range src.Kinds {
			if k.Stage == "" || k.MeanMS < 0 || k.MeanMS > maxMeanMS || k.Nodes < 1 || k.Tokens < 0 {
				return nil, fmt.Errorf("build costs %s: sources[%d].kinds[%d] (%q): want a stage, 0 <= mean_ms <= %d, nodes >= 1 and tokens >= 0, have %q, %d, %d, %d",
					path, i, j, k.Kind, maxMeanMS, k.Stage, k.MeanMS, k.Nodes, k.Tokens)
			}
			if kinds[[2]string{k.Stage, k.Kind}] {
				return nil, fmt.Errorf("build costs %s: sources[%d].kinds[%d]: stage %q kind %q listed twice", path, i, j, k.Stage, k.Kind)
			}
			kinds[[2]string{k.Stage, k.Kind}] = true
		}
	}
	return &f, nil
}

func fromJSON(kinds []kindJSON) []KindCost {
	out := make([]KindCost, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, KindCost{Stage: k.Stage, Kind: k.Kind, Mean: time.Duration(k.MeanMS) * time.Millisecond, Nodes: k.Nodes, Measured: k.Measured, Tokens: k.Tokens})
	}
	return out
}

func toJSON(costs []KindCost) []kindJSON {
	out := make([]kindJSON, 0, len(costs))
	for _, k := range costs {
		out = append(out, kindJSON{Stage: k.Stage, Kind: k.Kind, MeanMS: k.Mean.Milliseconds(), Nodes: k.Nodes, Measured: k.Measured.UTC(), Tokens: k.Tokens})
	}
	return out
}

// readJSONFile decodes the JSON file at path into v, refusing fields v does not have; found is false
// (and err nil) when the file is missing. what names the file's kind in a decoding error.
func readJSONFile(path, what string, v any) (found bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return true, fmt.Errorf("%s %s: %w", what, path, err)
	}
	return true, nil
}

// KeepCosts adds measured, what a build of target from source measured, to the costs file at path
// (created if missing; replaced whole, through a temporary file): each kind measured replaces its
// entry under source, the other kinds stay, and source becomes the file's first, the oldest beyond
// keepSources dropping out. A damaged file is replaced by measured alone, and that is reported in
// the error (the new file is written all the same). Builds that keep costs in the same file at once
// take turns (an flock on path+".lock", held from the read to the rename), so none loses another's.
func KeepCosts(path, target, source string, measured []KindCost) error {
	unlock, err := lockCosts(path)
	if err != nil {
		return fmt.Errorf("writing build costs %s: %w", path, err)
	}
	defer unlock()
	f, rerr := readCostsFile(path, target)
	if f == nil {
		f = &costsJSON{Version: costsVersion, Target: target}
	}
	sources := []sourceJSON{{Source: source, Kinds: toJSON(measured)}}
	for _, src := range f.Sources {
		if src.Source == source {
			sources[0].Kinds = toJSON(MergeCosts(fromJSON(src.Kinds), measured))
			continue
		}
		if len(sources) < keepSources {
			sources = append(sources, src)
		}
	}
	f.Sources = sources
	b, err := json.Marshal(f)
	if err == nil {
		err = writeFile(path, append(b, '\n'))
	}
	if err != nil {
		return fmt.Errorf("writing build costs %s: %w", path, err)
	}
	if rerr != nil {
		return fmt.Errorf("%w (replaced by this build's costs)", rerr)
	}
	return nil
}

// lockCosts takes the lock that serializes KeepCosts on path (blocking: each holds it for a read
// and a write of a few KiB).
func lockCosts(path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := flock.Lock(lf, unix.LOCK_EX); err != nil {
		lf.Close()
		return nil, fmt.Errorf("locking %s: %w", lf.Name(), err)
	}
	return func() { lf.Close() }, nil // closing the file releases the lock
}

// Estimate is how long a build that runs nodes should take by costs, the host's rates and the nodes'
// modeled costs (NodeStatus.CostNS) alone: what an ETA primed with them says before the build starts
// (ETA.Estimate). OK is false when none of the nodes can be estimated, or there are none.
func Estimate(costs []KindCost, cores int, rates []StageRate, nodes []engine.NodeStatus) Estimated {
	t := NewETA()
	t.Prime(costs)
	t.Model(cores, rates)
	for _, n := range nodes {
		t.Emit(engine.Event{Event: engine.EventPlan, Node: n.ID, Stage: n.Stage, CostNS: n.CostNS})
	}
	e := t.Estimate(time.Time{})
	e.OK = e.OK && (!e.Lower || e.Left > 0)
	return e
}
