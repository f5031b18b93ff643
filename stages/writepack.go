package stages

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sort"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
)

// WritePackParams are the parameters of "write-orkpack": the entries in execution order (each bound
// as input "e.<name>", a tiled entry), the board profile (a built-in name, or "" with input "board",
// a JSON profile file) and the promotion.
type WritePackParams struct {
	Board   string         `json:"board"`
	Entries []string       `json:"entries"`
	Promote *PromoteParams `json:"promote,omitempty"`
	// MaxEntryBytes is the largest tiled entry (codes + scales), for the memory estimate.
	MaxEntryBytes int64 `json:"max_entry_bytes"`
	// Residency binds input "residency" (a residency.json): the pack stores its plan (docs/orkpack.md
	// 3.1), and a promotion that would break it (hot experts over the budget, or the resident set over
	// its domains) is skipped like one that would break the domain plan.
	Residency bool `json:"residency,omitempty"`
}

// PromoteParams say which entries may move to their promoted tier (bound as input "p.<name>", the
// same weight finalized and tiled at the higher tier) and how many extra on-disk bytes that may
// cost. Candidates are taken worst base qerr first (ties by name); one that does not fit in what is
// left of the budget, or whose promotion would make the pack's domain plan exceed the board, is
// skipped (so a pack whose base tier fits the board, which the planner checks before anything runs,
// always commits).
type PromoteParams struct {
	Candidates  []string `json:"candidates"`
	BudgetBytes int64    `json:"budget_bytes"`
}

func init() {
	Register(Define("write-orkpack", 3, func(p WritePackParams) (Spec, error) {
		if len(p.Entries) == 0 {
			return Spec{}, fmt.Errorf("entries: none")
		}
		s := Spec{Outputs: []string{"pack"}, PeakMemory: 64<<20 + 2*p.MaxEntryBytes + int64(len(p.Entries))*4096}
		if p.Board == "" {
			s.Inputs = append(s.Inputs, "board")
		} else if _, ok := board.Builtin(p.Board); !ok {
			return Spec{}, fmt.Errorf("board %q: no built-in profile of that name", p.Board)
		}
		seen := map[string]bool{}
		for _, e := range p.Entries {
			if seen[e] {
				return Spec{}, fmt.Errorf("entry %q listed twice", e)
			}
			seen[e] = true
			s.Inputs = append(s.Inputs, "e."+e)
		}
		if p.Residency {
			s.Inputs = append(s.Inputs, "residency")
		}
		if p.Promote != nil {
			if p.Promote.BudgetBytes <= 0 {
				return Spec{}, fmt.Errorf("promote.budget_bytes %d: want > 0", p.Promote.BudgetBytes)
			}
			for _, c := range p.Promote.Candidates {
				if !seen[c] {
					return Spec{}, fmt.Errorf("promotion candidate %q is not an entry", c)
				}
				s.Inputs = append(s.Inputs, "p."+c)
			}
		}
		return s, nil
	}, runWritePack))
}

// boardProfile returns the profile a stage was told to use.
func boardProfile(name string, req Request) (board.Profile, error) {
	if name != "" {
		p, ok := board.Builtin(name)
		if !ok {
			return board.Profile{}, fmt.Errorf("board %q: no built-in profile", name)
		}
		return p, nil
	}
	data, err := os.ReadFile(req.Inputs["board"].Path)
	if err != nil {
		return board.Profile{}, err
	}
	p, err := board.Parse(data)
	if err != nil {
		return board.Profile{}, fmt.Errorf("board profile %s: %w", req.Inputs["board"].Path, err)
	}
	return p, nil
}

func entryInfo(path string) (*tiledEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return openTiledEntry(f, path, false)
}

// promotions decides which candidates are promoted: worst base qerr first, each if its extra
// on-disk bytes fit in what is left of the budget and the domain plan on prof (and the residency plan
// res, when not nil) still fits with it.
func promotions(p *PromoteParams, entries []string, prof board.Profile, res *pack.Residency, req Request) (map[string]bool, error) {
	type cand struct {
		name  string
		qerr  float64
		extra int64
		up    pack.Meta
	}
	metas, err := entryMetas(entries, nil, req)
	if err != nil {
		return nil, err
	}
	index := make(map[string]int, len(entries))
	for i, name := range entries {
		index[name] = i
	}
	var cs []cand
	for _, c := range p.Candidates {
		base, err := entryInfo(req.Inputs["e."+c].Path)
		if err != nil {
			return nil, err
		}
		up, err := entryInfo(req.Inputs["p."+c].Path)
		if err != nil {
			return nil, err
		}
		if base.Meta.Name != c || up.Meta.Name != c {
			return nil, fmt.Errorf("promotion candidate %q: entries hold %q and %q", c, base.Meta.Name, up.Meta.Name)
		}
		um, err := up.Meta.PackMeta()
		if err != nil {
			return nil, err
		}
		cs = append(cs, cand{c, base.Meta.QErr, up.OnDiskLength - base.OnDiskLength, um})
	}
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].qerr != cs[j].qerr {
			return cs[i].qerr > cs[j].qerr
		}
		return cs[i].name < cs[j].name
	})
	left := p.BudgetBytes
	out := map[string]bool{}
	for _, c := range cs {
		if c.extra > left {
			continue
		}
		i := index[c.name]
		base := metas[i].Meta
		metas[i].Meta = c.up
		if err := fits(metas, prof, res); err != nil {
			if !errors.Is(err, board.ErrDoesNotFit) {
				return nil, err
			}
			metas[i].Meta = base
			req.Logger.Info("promotion skipped: the pack would not fit the board with it", "entry", c.name, "reason", err)
			continue
		}
		out[c.name] = true
		left -= max(c.extra, 0)
	}
	return out, nil
}

// fits checks entries (index order) against the domain plan on prof and the residency plan res (when not
// nil).
func fits(entries []pack.Entry, prof board.Profile, res *pack.Residency) error {
	if _, err := board.PlanDomains(entries, prof); err != nil {
		return err
	}
	if res != nil {
		return board.CheckResidency(*res, entries, prof)
	}
	return nil
}

func runWritePack(ctx context.Context, p WritePackParams, req Request) error {
	prof, err := boardProfile(p.Board, req)
	if err != nil {
		return err
	}
	opts := []pack.Option{pack.WithLogger(req.Logger)}
	var res *pack.Residency
	if p.Residency {
		rf, err := ReadResidency(req.Inputs["residency"])
		if err != nil {
			return err
		}
		r, err := rf.Pack()
		if err != nil {
			return err
		}
		res = &r
		opts = append(opts, pack.WithResidency(r))
	}
	promoted := map[string]bool{}
	if p.Promote != nil {
		if promoted, err = promotions(p.Promote, p.Entries, prof, res, req); err != nil {
			return err
		}
	}
	if res != nil {
		if err := checkResidencyInputs(*res, p.Entries, promoted, prof, req); err != nil {
			return err
		}
	}
	w, err := pack.Create(ctx, req.Output("pack"), board.Planner(prof), opts...)
	if err != nil {
		return err
	}
	defer w.Close()
	paths := make([]string, len(p.Entries))
	for i, name := range p.Entries {
		in := "e." + name
		if promoted[name] {
			in = "p." + name
		}
		paths[i] = req.Inputs[in].Path
	}
	if err := addEntries(ctx, w, p.Entries, paths); err != nil {
		return err
	}
	if err := w.Commit(ctx); err != nil {
		return fmt.Errorf("committing the pack: %w", err)
	}
	return nil
}

// addEntries adds the tiled entries (names[i] read from paths[i]) to w in order, preparing each (mapped,
// checked, hashed: pack.Writer.PrepareBytes) in one goroutine while the one before is written in
// another: at most two entries mapped at once, which WritePackParams.MaxEntryBytes declares.
func addEntries(ctx context.Context, w *pack.Writer, names, paths []string) error {
	g, gctx := errgroup.WithContext(ctx)
	type mapped struct {
		pe    *pack.Prepared
		unmap func() error
	}
	prepared := make(chan mapped)
	slots := make(chan struct{}, 2)
	g.Go(func() error {
		defer close(prepared)
		for i, name := range names {
			select {
			case slots <- struct{}{}:
			case <-gctx.Done():
				return gctx.Err()
			}
			pe, unmap, err := prepareEntry(w, name, paths[i])
			if err != nil {
				return err
			}
			select {
			case prepared <- mapped{pe, unmap}:
			case <-gctx.Done():
				unmap()
				return gctx.Err()
			}
		}
		return nil
	})
	g.Go(func() error {
		for m := range prepared {
			err := w.AddPrepared(gctx, m.pe)
			if err != nil {
				err = fmt.Errorf("adding %s to the pack: %w", m.pe.Name(), err)
			}
			if uerr := m.unmap(); err == nil {
				err = uerr
			}
			if err != nil {
				return err // the preparing goroutine sees gctx end and releases what it holds
			}
			<-slots
		}
		return nil
	})
	return g.Wait()
}

// prepareEntry maps the tiled entry at path, bound as name, and prepares it for w
// (pack.Writer.PrepareBytes: checked and hashed in place); unmap releases the mapping once the entry
// is written.
func prepareEntry(w *pack.Writer, name, path string) (pe *pack.Prepared, unmap func() error, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	te, err := openTiledEntry(f, path, false)
	if err != nil {
		return nil, nil, err
	}
	if te.Meta.Name != name {
		return nil, nil, fmt.Errorf("tiled entry %s holds %q, bound as %q", path, te.Meta.Name, name)
	}
	pm, err := te.Meta.PackMeta()
	if err != nil {
		return nil, nil, err
	}
	pm.Nibbles = nibbleOrder(te.Nibbles)
	m, err := unix.Mmap(int(f.Fd()), 0, int(te.CodesOff+te.CodesLen), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mapping tiled entry %s: %w", path, err)
	}
	unmap = func() error {
		if err := unix.Munmap(m); err != nil {
			return fmt.Errorf("unmapping tiled entry %s: %w", path, err)
		}
		return nil
	}
	_ = unix.Madvise(m, madvPopulate) // one call instead of a fault per page; only a hint
	if pe, err = prepareMapped(w, pm, m, te); err != nil {
		unmap()
		return nil, nil, fmt.Errorf("adding %s (%s) to the pack: %w", name, path, err)
	}
	return pe, unmap, nil
}

// prepareMapped is w.PrepareBytes of the tiled entry te mapped whole as m (its scales end where the
// 8-byte codes length before CodesOff starts). A fault on the mapping (the file truncated or its pages
// unreadable underneath) is an error, not a crash of the build; any other panic is not caught.
func prepareMapped(w *pack.Writer, pm pack.Meta, m []byte, te *tiledEntry) (pe *pack.Prepared, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(interface{ Addr() uintptr }); ok {
				err = fmt.Errorf("fault reading the mapped entry at address %#x: %v", f.Addr(), r)
				return
			}
			panic(r)
		}
	}()
	return w.PrepareBytes(pm, m[te.CodesOff:], m[te.ScalesOff:te.CodesOff-8])
}

// checkResidencyInputs checks the residency plan against the entries as they will be written (promoted
// ones at their promoted tier) before anything is written.
func checkResidencyInputs(res pack.Residency, names []string, promoted map[string]bool, prof board.Profile, req Request) error {
	metas, err := entryMetas(names, promoted, req)
	if err != nil {
		return err
	}
	if err := board.CheckResidency(res, metas, prof); err != nil {
		return fmt.Errorf("residency plan %s: %w", req.Inputs["residency"].Path, err)
	}
	return nil
}

// entryMetas reads the metadata of the tiled entries bound for names: "p.<name>" for the promoted ones,
// "e.<name>" for the others.
func entryMetas(names []string, promoted map[string]bool, req Request) ([]pack.Entry, error) {
	metas := make([]pack.Entry, len(names))
	for i, name := range names {
		in := "e." + name
		if promoted[name] {
			in = "p." + name
		}
		te, err := entryInfo(req.Inputs[in].Path)
		if err != nil {
			return nil, err
		}
		if metas[i].Meta, err = te.Meta.PackMeta(); err != nil {
			return nil, err
		}
	}
	return metas, nil
}
