package verify

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"orkpipe/ork/board"
	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
)

// packOutcome is what checkPack learned: the two check results and what later checks need.
type packOutcome struct {
	integrity, loader             error
	integrityDetail, loaderDetail string
	stored                        pack.Board
	entries                       []pack.Entry // nil when the pack did not open
	residency                     *pack.Residency
	profile                       *board.Profile
	profileErr                    error
}

// checkPack opens the pack (header, footer, index) and reads each entry once: its BLAKE3 decides
// "pack"; decoding it through its dtype's untiler (codes in range, scales finite, padding zero)
// decides "loader-coverage". One entry is in memory at a time.
func checkPack(ctx context.Context, path string, prof *board.Profile) packOutcome {
	var out packOutcome
	r, err := pack.Open(ctx, path)
	if err != nil {
		out.integrity = err
		out.loader = fmt.Errorf("not checked: the pack did not open")
		return out
	}
	defer r.Close()
	out.stored, out.entries = r.Board(), r.Entries()
	if res, ok := r.Residency(); ok {
		out.residency = &res
	}
	out.profile, out.profileErr = prof, nil
	if prof == nil {
		if p, ok := board.Builtin(out.stored.Name); ok {
			out.profile = &p
		} else {
			out.profileErr = fmt.Errorf("pack %s was planned for board profile %q, which is not built in: pass the profile (--board FILE)", path, out.stored.Name)
		}
	}
	var hashErrs, loadErrs []error
	byDType := map[string]int{}
	for _, e := range out.entries {
		if err := ctx.Err(); err != nil {
			out.integrity, out.loader = err, err
			return out
		}
		if limit := decodeLimit(out.profile); e.Length > limit {
			// Read whole to decode, an entry is held in memory: one larger than a domain of the board
			// cannot load there (the fit check says so) and is only hashed, through a bounded buffer.
			if err := r.VerifyEntry(ctx, e.Name); err != nil {
				hashErrs = append(hashErrs, err)
			} else {
				loadErrs = append(loadErrs, fmt.Errorf("entry %q: %d bytes, more than the %d a domain of the board holds: not decoded", e.Name, e.Length, limit))
			}
			continue
		}
		ent, data, err := r.ReadEntry(ctx, e.Name)
		if err != nil {
			hashErrs = append(hashErrs, err)
			continue
		}
		byDType[ent.DType.String()]++
		w, err := pack.Decode(ent, data)
		if err != nil {
			loadErrs = append(loadErrs, err)
			continue
		}
		if err := codesInRange(w); err != nil {
			loadErrs = append(loadErrs, err)
		}
	}
	out.integrity = joinAll(fmt.Sprintf("pack %s", path), hashErrs)
	out.integrityDetail = fmt.Sprintf("header, footer, index (%s) and %d entry hashes verified", r.IndexDigest(), len(out.entries))
	if len(hashErrs) > 0 {
		loadErrs = append(loadErrs, fmt.Errorf("%d entries not decoded: their bytes failed the hash check", len(hashErrs)))
	}
	out.loader = joinAll(fmt.Sprintf("pack %s", path), loadErrs)
	var kinds []string
	for k, n := range byDType {
		kinds = append(kinds, fmt.Sprintf("%s x%d", k, n))
	}
	sort.Strings(kinds)
	out.loaderDetail = fmt.Sprintf("%d entries decoded through their dtype's loader (%s): codes in range, scales finite", len(out.entries), strings.Join(kinds, ", "))
	return out
}

// decodeLimit is the largest entry the loader check reads whole: what one IOMMU domain of the board
// holds (prof's capacity, or 4 GiB, an RK3588 domain, when the profile is unknown).
func decodeLimit(prof *board.Profile) int64 {
	if prof == nil {
		return 4 << 30
	}
	return prof.Capacity()
}

// codesInRange checks the decoded codes against the quantizer's range: int4 -8..7, int8 -127..127.
func codesInRange(w pack.Weight) error {
	if w.DType == pack.F16 {
		return nil
	}
	lo, hi := int8(-127), int8(127)
	if w.DType.Int4() {
		lo, hi = -8, 7
	}
	for i, c := range w.Codes {
		if c < lo || c > hi {
			return fmt.Errorf("entry %q: code %d at row %d col %d is outside %d..%d for %s", w.Name, c, i/w.K, i%w.K, lo, hi, w.DType)
		}
	}
	return nil
}

// checkStub checks the stub against the pack's owned set (experts folded into their tensor).
func checkStub(ctx context.Context, stub string, entries []pack.Entry, allowZero []string) (string, error) {
	if entries == nil {
		return "", fmt.Errorf("not checked: the pack did not open")
	}
	var opts []gguf.VerifyOption
	if len(allowZero) > 0 {
		opts = append(opts, gguf.WithAllowZero(allowZero...))
	}
	rep, err := gguf.VerifyStub(ctx, stub, gguf.NewNameSet(pack.OwnedTensors(entries)...), opts...)
	if err != nil {
		return "", err
	}
	f, err := gguf.Open(ctx, stub)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, e := range entries {
		t, err := f.Tensor(e.Tensor())
		if err != nil {
			return "", fmt.Errorf("stub %s: %w", stub, err)
		}
		if err := EntryFitsTensor(e, t); err != nil {
			return "", fmt.Errorf("stub %s: %w", stub, err)
		}
	}
	return fmt.Sprintf("%d tensors: %d owned by the pack are holes, the others hold data (%d bytes)", rep.Tensors, rep.Owned, rep.DataBytes), nil
}

// checkFit plans the pack's entries on the profile and compares with the plan stored in the index.
func checkFit(pk packOutcome, path string) (string, error) {
	if pk.entries == nil {
		return "", fmt.Errorf("not checked: the pack did not open")
	}
	if pk.profile == nil {
		return "", pk.profileErr
	}
	pl, err := board.PlanDomains(pk.entries, *pk.profile)
	if err != nil {
		return "", fmt.Errorf("pack %s on board profile %q: %w", path, pk.profile.Name, err)
	}
	if err := board.CheckPlan(pk.stored, pk.entries, *pk.profile); err != nil {
		return "", fmt.Errorf("pack %s: %w", path, err)
	}
	detail := fmt.Sprintf("%d domains of at most %d on %q (%d bytes resident, %d per domain at most)",
		pl.Domains(), pk.profile.MaxDomains, pk.profile.Name, pl.Total, pk.profile.Capacity())
	if res := pk.residency; res != nil {
		if err := board.CheckResidency(*res, pk.entries, *pk.profile); err != nil {
			return "", fmt.Errorf("pack %s: %w", path, err)
		}
		detail += fmt.Sprintf("; residency: %d of %d experts resident at start in %d domain(s), expected hit rate %.4f", res.Hot, len(res.Experts), res.Domains, res.HitRate())
	}
	return detail, nil
}

func joinAll(prefix string, errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return fmt.Errorf("%s: %d problems: %w", prefix, len(errs), errors.Join(errs...))
}
