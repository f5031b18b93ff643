package progress

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"time"
)

// StageRate is how a host's builds turned a stage's modeled costs (engine.Event.CostNS, CPU time of
// one core of the planning host, by its measured speeds) into wall time: over their finished nodes of one size class, the
// sum of the nodes' shares of the wall time (ETA's doc) and the sum of their modeled costs. Share/Cost
// is the rate: a node's expected share is its cost times it. A rate is kept for each stage and for
// AnyStage (every stage's nodes together), per size class (Large: nodes of at least LargeCost, whose
// work dominates their start; the others, whose start dominates), so that the rate a small model's
// builds measure is never applied to a large model's nodes.
type StageRate struct {
	Stage    string // the nodes' stage, or AnyStage
	Large    bool   // nodes of a modeled cost of at least LargeCost
	Share    time.Duration
	Cost     time.Duration
	Measured time.Time // the newest build that measured some of it
}

// AnyStage is the Stage of the rate over all stages' nodes.
const AnyStage = "*"

// LargeCost is the modeled cost from which a node is in the large class.
const LargeCost = time.Second

// rate is Share/Cost.
func (r StageRate) rate() float64 { return float64(r.Share) / float64(r.Cost) }

// RatesFile is where a cache keeps its host's rates: <history dir>/_rates, beside the targets'
// directories (a target name, recipe.Recipe's, cannot start with '_').
func RatesFile(historyDir string) string { return filepath.Join(historyDir, "_rates") }

// The rates file's format:
//
//	{"version":2,"rates":[{"stage":S,"large":B,"share_ms":N,"cost_ms":M,"measured":RFC3339}, ...]}
//
// Version 1 rated costs at the reference host's speed, before the costs were the planning host's
// (hostspeed): such a file is read as holding no rates, and the next build replaces it.
const (
	ratesVersion    = 2
	refRatesVersion = 1
)

type ratesJSON struct {
	Version int        `json:"version"`
	Rates   []rateJSON `json:"rates"`
}

type rateJSON struct {
	Stage    string    `json:"stage"`
	Large    bool      `json:"large,omitempty"`
	ShareMS  int64     `json:"share_ms"`
	CostMS   int64     `json:"cost_ms"`
	Measured time.Time `json:"measured"`
}

// ReadRates returns the rates kept in the rates file at path: none (and no error) when it is missing
// or of version 1 (the format's doc).
// A damaged file, or one of another format version, is an error naming the file and what is wrong.
func ReadRates(path string) ([]StageRate, error) {
	var f ratesJSON
	if found, err := readJSONFile(path, "build rates", &f); !found || err != nil {
		return nil, err
	}
	if f.Version == refRatesVersion {
		return nil, nil
	}
	if f.Version != ratesVersion {
		return nil, fmt.Errorf("build rates %s: version %d, want %d", path, f.Version, ratesVersion)
	}
	seen := map[rateKey]bool{}
	out := make([]StageRate, 0, len(f.Rates))
	for i, r := range f.Rates {
		if r.Stage == "" || r.ShareMS < 0 || r.ShareMS > maxMeanMS || r.CostMS < 1 || r.CostMS > maxMeanMS {
			return nil, fmt.Errorf("build rates %s: rates[%d] (%q): want a stage, 0 <= share_ms <= %d and 1 <= cost_ms <= %d, have %d and %d",
				path, i, r.Stage, maxMeanMS, maxMeanMS, r.ShareMS, r.CostMS)
		}
		k := rateKey{r.Stage, r.Large}
		if seen[k] {
			return nil, fmt.Errorf("build rates %s: rates[%d]: stage %q (large %v) listed twice", path, i, r.Stage, r.Large)
		}
		seen[k] = true
		out = append(out, StageRate{Stage: r.Stage, Large: r.Large, Share: time.Duration(r.ShareMS) * time.Millisecond,
			Cost: time.Duration(r.CostMS) * time.Millisecond, Measured: r.Measured})
	}
	return out, nil
}

type rateKey struct {
	stage string
	large bool
}

// MergeRates returns what old and now, a newer build's rates, say together: a rate now measured adds
// to half the old one's sums (the newer build weighs more; a rate measured by builds long gone fades
// as new ones come), the others stay as they were. Sorted by stage, small before large.
func MergeRates(old, now []StageRate) []StageRate {
	byKey := map[rateKey]StageRate{}
	for _, r := range old {
		byKey[rateKey{r.Stage, r.Large}] = r
	}
	for _, r := range now {
		k := rateKey{r.Stage, r.Large}
		if o, ok := byKey[k]; ok {
			r.Share += o.Share / 2
			r.Cost += o.Cost / 2
		}
		byKey[k] = r
	}
	out := make([]StageRate, 0, len(byKey))
	for _, r := range byKey {
		out = append(out, r)
	}
	sortRates(out)
	return out
}

func sortRates(r []StageRate) {
	sort.Slice(r, func(i, j int) bool {
		if r[i].Stage != r[j].Stage {
			return r[i].Stage < r[j].Stage
		}
		return !r[i].Large && r[j].Large
	})
}

// KeepRates adds measured, what a build measured (ETA.Rates), to the rates file at path (MergeRates;
// created if missing, replaced whole through a temporary file, under the same kind of lock as
// KeepCosts). A damaged file is replaced by measured alone, and that is reported in the error.
func KeepRates(path string, measured []StageRate) error {
	unlock, err := lockCosts(path)
	if err != nil {
		return fmt.Errorf("writing build rates %s: %w", path, err)
	}
	defer unlock()
	old, rerr := ReadRates(path)
	f := ratesJSON{Version: ratesVersion}
	for _, r := range MergeRates(old, measured) {
		f.Rates = append(f.Rates, rateJSON{Stage: r.Stage, Large: r.Large, ShareMS: r.Share.Milliseconds(),
			CostMS: max(1, r.Cost.Milliseconds()), Measured: r.Measured.UTC()})
	}
	b, err := json.Marshal(f)
	if err == nil {
		err = writeFile(path, append(b, '\n'))
	}
	if err != nil {
		return fmt.Errorf("writing build rates %s: %w", path, err)
	}
	if rerr != nil {
		return fmt.Errorf("%w (replaced by this build's rates)", rerr)
	}
	return nil
}
