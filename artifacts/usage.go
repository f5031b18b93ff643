package artifacts

import (
	"context"
	"fmt"
	"sort"

	"golang.org/x/sys/unix"
)

// UsageReport is what the store holds: its objects, in all and by the stage whose action records
// name them as outputs, and how much of that the pins keep from GC. Bytes are the objects' sizes;
// Disk the blocks their files take (a sparse stub takes far less than its size).
type UsageReport struct {
	Objects    int   `json:"objects"`
	Bytes      int64 `json:"bytes"`
	Disk       int64 `json:"disk"`
	Pinned     int   `json:"pinned"`
	PinnedDisk int64 `json:"pinned_disk"`
	// OutdatedDisk is what gc with the same outdated predicate (and inputs) frees besides sizes and
	// ages: the unpinned objects only outdated action records name (0 without a predicate).
	OutdatedDisk int64        `json:"outdated_disk"`
	Stages       []StageUsage `json:"stages"` // the most disk first; Stage "" for objects no action record names
	ActionCount  int          `json:"actions"`
}

// StageUsage is the share of one stage: the objects its action records name (an object that several
// stages made counts for the first by name).
type StageUsage struct {
	Stage        string `json:"stage"`
	Objects      int    `json:"objects"`
	Bytes        int64  `json:"bytes"`
	Disk         int64  `json:"disk"`
	PinnedDisk   int64  `json:"pinned_disk"`
	OutdatedDisk int64  `json:"outdated_disk"`
}

// Usage walks the objects, the action records and the pins. It reads and changes nothing else, and
// takes no lock: objects stored meanwhile may be missing from the report. outdated, if not nil, is
// GCOptions.Outdated's predicate and inputs GCOptions.Inputs (or nil): the report then says what gc
// with them would free (OutdatedDisk).
func (s *Store) Usage(ctx context.Context, outdated func(stage string, version int) bool, inputs func(key Digest) ([]Digest, bool)) (UsageReport, error) {
	var rep UsageReport
	pins, err := s.pinned()
	if err != nil {
		return rep, fmt.Errorf("cache usage: %w", err)
	}
	var stale staleRecords
	if outdated != nil {
		if stale, err = s.outdatedRecords(ctx, "cache usage", false, outdated, inputs); err != nil {
			return rep, fmt.Errorf("cache usage: %w", err)
		}
	}
	stageOf := map[Digest]string{}
	err = s.walkActions(ctx, "cache usage", false, func(_ string, rec ActionRecord) error {
		rep.ActionCount++
		for _, o := range rec.Outputs {
			if st, ok := stageOf[o.Digest]; !ok || rec.Stage < st {
				stageOf[o.Digest] = rec.Stage
			}
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("cache usage: reading action records: %w", err)
	}
	objs, _, err := s.listObjects(ctx)
	if err != nil {
		return rep, fmt.Errorf("cache usage: %w", err)
	}
	byStage := map[string]*StageUsage{}
	for _, o := range objs {
		var st unix.Stat_t
		if err := unix.Lstat(o.path, &st); err != nil {
			continue // removed meanwhile (a concurrent gc)
		}
		disk := int64(st.Blocks) * 512
		u := byStage[stageOf[o.Digest]]
		if u == nil {
			u = &StageUsage{Stage: stageOf[o.Digest]}
			byStage[u.Stage] = u
		}
		rep.Objects++
		rep.Bytes += o.Size
		rep.Disk += disk
		u.Objects++
		u.Bytes += o.Size
		u.Disk += disk
		switch {
		case pins[o.Digest]:
			rep.Pinned++
			rep.PinnedDisk += disk
			u.PinnedDisk += disk
		case stale.only[o.Digest]:
			rep.OutdatedDisk += disk
			u.OutdatedDisk += disk
		}
	}
	for _, u := range byStage {
		rep.Stages = append(rep.Stages, *u)
	}
	sort.Slice(rep.Stages, func(i, j int) bool {
		a, b := rep.Stages[i], rep.Stages[j]
		return a.Disk > b.Disk || a.Disk == b.Disk && a.Stage < b.Stage
	})
	return rep, nil
}
