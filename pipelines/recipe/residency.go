package recipe

import (
	"errors"
	"fmt"
	"strings"

	"orkpipe/internal/units"
	"orkpipe/ork/board"
)

// Residency plans which experts of an MoE model stay resident on the board (docs/recipes.md): the most
// routed ones, by the routing statistics calibration records, within Budget, with the dense weights, in
// Domains IOMMU domains; the others are streamed. The pack stores the plan (docs/orkpack.md 3.1).
type Residency struct {
	// Budget is how many resident bytes the hot experts may take: auto (what the domains hold beside the
	// dense weights), a percentage of every expert's resident bytes ("25%"; "100%" asks every expert
	// resident) or a size ("3GiB").
	Budget string `yaml:"budget" json:"budget"`
	// Domains is how many IOMMU domains (4 GiB windows on rk3588) the dense weights and the hot experts
	// share (default 1).
	Domains int `yaml:"domains" json:"domains"`

	spec board.Budget
}

// Spec returns the budget as board.Budget (valid after the recipe validated).
func (r *Residency) Spec() board.Budget { return r.spec }

func (r *Residency) validate(rec *Recipe) error {
	var errs []error
	if r.Budget == "" {
		r.Budget = "auto"
	}
	switch b := strings.TrimSpace(r.Budget); {
	case b == "auto" || strings.HasSuffix(b, "%"):
		spec, err := board.ParseBudget(b)
		if err != nil {
			errs = append(errs, fmt.Errorf("residency.budget: %v", err))
		}
		r.spec = spec
	default:
		n, err := units.ParseSize(b)
		if err != nil {
			errs = append(errs, fmt.Errorf("residency.budget: %q: want auto, a percentage of the experts' resident bytes (25%%) or a size (3GiB)", r.Budget))
		}
		r.spec = board.Budget{Bytes: n}
	}
	if r.Domains == 0 {
		r.Domains = 1
	}
	if r.Domains < 1 {
		errs = append(errs, fmt.Errorf("residency.domains: %d: want at least 1 IOMMU domain", r.Domains))
	}
	if rec.Calibration == nil {
		errs = append(errs, fmt.Errorf("calibration: required because the recipe plans expert residency (residency), which needs the routing statistics calibration records"))
	}
	return errors.Join(errs...)
}
