package stages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"

	"orkpipe/artifacts"
	"orkpipe/ork/board"
	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
)

// VerifyLocalParams are the parameters of "verify-local": the board profile the plan must fit (a
// built-in name, or "" with input "board").
type VerifyLocalParams struct {
	Board string `json:"board"`
	// MaxEntryBytes is the largest entry (codes and scales; write-orkpack's figure) for the memory
	// estimate: the entries are checked side by side, each worker holding one entry (checked
	// without decoding: pack.Reader.VerifyEntries). 0: one worker within the 256 MiB of version 2's
	// estimate.
	MaxEntryBytes int64 `json:"max_entry_bytes,omitempty"`
}

// verifyBase is verify-local's memory besides the entry workers': the process share, the stub and
// source headers, buffers.
const verifyBase = 64 << 20

// VerifyLocalMemory is the declared peak memory of verify-local: 256 MiB, or with MaxEntryBytes one
// worker per CPU, each holding an entry, if that is more.
func VerifyLocalMemory(p VerifyLocalParams) int64 {
	return max(256<<20, verifyBase+int64(runtime.GOMAXPROCS(0))*p.MaxEntryBytes)
}

// VerifyResult is the "verify.json" output: what was checked, all of it passed.
type VerifyResult struct {
	PackEntries int    `json:"pack_entries"`
	PackIndex   string `json:"pack_index"`
	Board       string `json:"board"`
	Domains     int    `json:"domains"`
	MaxDomains  int    `json:"max_domains"`
	Resident    int64  `json:"resident_bytes"`
	StubTensors int    `json:"stub_tensors"`
	StubOwned   int    `json:"stub_owned"`
	StubHeader  string `json:"stub_header"`
	// StubDataBytes is the data size of the stub's tensors not owned by the pack (what it must
	// hold). Nothing here depends on how the stub is stored (holes or not, path, inode): the
	// same node key gives the same bytes from every executor (version 2 replaced
	// stub_data_bytes_read, which counted the bytes read and so depended on the holes).
	StubDataBytes int64 `json:"stub_data_bytes"`
	// Residency is the pack's residency plan, checked on the board profile (board.CheckResidency); absent
	// for a pack without one.
	Residency *VerifyResidency `json:"residency,omitempty"`
}

// VerifyResidency summarizes a verified residency plan.
type VerifyResidency struct {
	Experts int     `json:"experts"`
	Hot     int     `json:"hot"`
	Domains int     `json:"domains"`
	Budget  int64   `json:"budget_bytes"`
	HitRate float64 `json:"hit_rate"`
}

func init() {
	Register(Define("verify-local", 2, func(p VerifyLocalParams) (Spec, error) {
		if p.MaxEntryBytes < 0 {
			return Spec{}, fmt.Errorf("max_entry_bytes %d: want >= 0", p.MaxEntryBytes)
		}
		s := Spec{Inputs: []string{"model", "pack", "stub"}, Outputs: []string{"verify.json"}, PeakMemory: VerifyLocalMemory(p)}
		if p.Board == "" {
			s.Inputs = append(s.Inputs, "board")
		}
		return s, nil
	}, runVerifyLocal))
}

func runVerifyLocal(ctx context.Context, p VerifyLocalParams, req Request) error {
	prof, err := boardProfile(p.Board, req)
	if err != nil {
		return err
	}
	ppath := req.Inputs["pack"].Path
	r, err := pack.Open(ctx, ppath)
	if err != nil {
		return err
	}
	defer r.Close()
	// As many entry workers as CPUs, as far as the declared memory holds them (at least one).
	workers := min(runtime.GOMAXPROCS(0), int(max(1, (VerifyLocalMemory(p)-verifyBase)/max(1, r.VerifyMemory()))))
	// Each worker's buffer from the process's pool (getBuffer: the rtn-tile nodes before leave buffers
	// sized for their entries), of at most a worker's share of the declared memory.
	bufs := make([][]byte, workers)
	share := int((VerifyLocalMemory(p) - verifyBase) / int64(workers))
	if need := int(r.VerifyMemory()); need <= share {
		for i := range bufs {
			if bufs[i], err = getBuffer(need, need, share); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = r.VerifyEntriesInto(ctx, slices.Clone(bufs))
	}
	for _, b := range bufs {
		putBuffer(b)
	}
	if err != nil {
		return fmt.Errorf("pack %s: %w", ppath, err)
	}
	if err := board.CheckPlan(r.Board(), r.Entries(), prof); err != nil {
		return fmt.Errorf("pack %s on board %s: %w", ppath, prof.Name, err)
	}
	var residency *VerifyResidency
	if res, ok := r.Residency(); ok {
		if err := board.CheckResidency(res, r.Entries(), prof); err != nil {
			return fmt.Errorf("pack %s on board %s: %w", ppath, prof.Name, err)
		}
		residency = &VerifyResidency{Experts: len(res.Experts), Hot: res.Hot, Domains: res.Domains, Budget: res.Budget, HitRate: res.HitRate()}
	}
	src, err := gguf.Open(ctx, req.Inputs["model"].Path)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := checkPackCovers(r, src); err != nil {
		return fmt.Errorf("pack %s: %w", ppath, err)
	}
	hd, err := src.HeaderDigest(ctx)
	if err != nil {
		return err
	}
	spath := req.Inputs["stub"].Path
	rep, err := gguf.VerifyStub(ctx, spath, gguf.NewNameSet(pack.OwnedTensors(r.Entries())...), gguf.WithSourceHeaderDigest(hd))
	if err != nil {
		return fmt.Errorf("stub %s against pack %s: %w", spath, ppath, err)
	}
	if len(rep.Problems) > 0 {
		var errs []error
		for _, pr := range rep.Problems {
			errs = append(errs, errors.New(pr.String()))
		}
		return fmt.Errorf("stub %s: %w", spath, errors.Join(errs...))
	}
	var resident int64
	for _, e := range r.Entries() {
		resident += e.ResidentBytes
	}
	hdr, _ := artifacts.DigestFromBytes(rep.HeaderDigest[:])
	out := VerifyResult{PackEntries: len(r.Entries()), PackIndex: r.IndexDigest().String(), Board: prof.Name,
		Domains: r.Board().Domains, MaxDomains: prof.MaxDomains, Resident: resident,
		StubTensors: rep.Tensors, StubOwned: rep.Owned, StubHeader: hdr.String(), StubDataBytes: rep.DataBytes, Residency: residency}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(req.Output("verify.json"), append(b, '\n'), 0o644)
}
