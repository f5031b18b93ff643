package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
)

// specRows names the rows of a row spec that produces more than one.
var specRows = map[string][]string{"push-pull": {"push", "pull"}}

// renderOnly re-renders saved results (merged with merge, if given) without measuring anything.
func renderOnly(path, merge, jsonOut, mdOut string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-render: %w", err)
	}
	rep := &Report{}
	if err := json.Unmarshal(b, rep); err != nil {
		return fmt.Errorf("-render %s: %w", path, err)
	}
	if merge != "" {
		if err := mergeRows(rep, merge); err != nil {
			return err
		}
	}
	for i := range rep.Rows {
		rep.Rows[i].refit()
	}
	rep.Targets = targets(rep)
	md := Markdown(rep)
	fmt.Print(md)
	if jsonOut != "" {
		if err := writeJSON(jsonOut, rep); err != nil {
			return err
		}
	}
	if mdOut != "" {
		return spliceFile(mdOut, md)
	}
	return nil
}

// mergeRows replaces the rows rep skipped by the measured rows of the earlier results in path,
// each noting the run it comes from (time and load average), so a partial re-run keeps the rest.
// A row both measured keeps this run's measures and gains the earlier run's measures of other
// labels (an rss budget run separately), each noting the run that measured it. A scaling row (one
// with a fit) gains none: its fit is over the sizes one run measured, on one host at one load.
func mergeRows(rep *Report, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-merge: %w", err)
	}
	var old Report
	if err := json.Unmarshal(b, &old); err != nil {
		return fmt.Errorf("-merge %s: %w", path, err)
	}
	from := fmt.Sprintf("from the run of %s to %s (orkpipe built %s; load average %s at start, %s at end)",
		old.Started.UTC().Format("2006-01-02 15:04"), old.Finished.UTC().Format("15:04"), buildName(old.BLAS), old.Machine.LoadStart, old.Machine.LoadEnd)
	var rows []Row
	short := fmt.Sprintf("from the run of %s to %s", old.Started.UTC().Format("2006-01-02 15:04"), old.Finished.UTC().Format("15:04"))
	for _, r := range rep.Rows {
		if r.Skipped == "" {
			for _, o := range old.Rows {
				if o.ID != r.ID || o.Skipped != "" || r.FitUnit != "" {
					continue
				}
				for _, m := range o.Measures {
					if m.Skipped == "" && !slices.ContainsFunc(r.Measures, func(x Measure) bool { return x.Label == m.Label }) {
						if !strings.Contains(m.Extra, "from the run of") { // merged before: keeps the run that measured it
							m.Extra = strings.TrimPrefix(m.Extra+"; "+short, "; ")
						}
						r.Measures = append(r.Measures, m)
					}
				}
			}
			r.finish()
			rows = append(rows, r)
			continue
		}
		kept := false
		for _, o := range old.Rows {
			if (o.ID == r.ID || slices.Contains(specRows[r.ID], o.ID)) && o.Skipped == "" {
				switch i := strings.Index(o.Note, "from the run of"); {
				case i < 0:
					o.Note = strings.TrimSpace(o.Note + "; " + from)
				default: // a row merged before keeps the run that measured it: the first one named
					if j := strings.Index(o.Note[i+1:], "; from the run of"); j >= 0 {
						o.Note = o.Note[:i+1+j] // (harnesses before session 3 appended every merge's run)
					}
				}
				rows, kept = append(rows, o), true
			}
		}
		if !kept {
			rows = append(rows, r)
		}
	}
	rep.Rows = rows
	return nil
}
