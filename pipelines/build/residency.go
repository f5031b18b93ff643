package build

import (
	"fmt"
	"path/filepath"

	"orkpipe/pipelines/engine"
	"orkpipe/stages"
)

// Export names of an MoE build's routing statistics and residency plan.
const (
	RoutingExport   = "routing.json"
	ResidencyExport = "residency.json"
)

// moePlan is what an MoE build adds to the tail: the calibration routing statistics, the residency plan
// and the held-out routing it is scored against (each nil when the build has none).
type moePlan struct {
	routing, residency, heldOut *engine.Input
	heldOutText                 string
}

// planRouting adds the node merging the calibrate windows' routing statistics into routing.json (nil for a
// model without MoE blocks).
func planRouting(g *engine.Graph, routes []engine.Input) *engine.Input {
	if len(routes) == 0 {
		return nil
	}
	in := map[string]engine.Input{}
	for i, r := range routes {
		in[fmt.Sprintf("w.%d", i)] = r
	}
	o := g.Add("routing", "routing", stages.RoutingParams{Windows: len(routes)}, in).Cost(nodeStartNS).Output("routing.json")
	return &o
}

// planResidency adds, for a recipe with a residency section, the residency node (the plan from the
// routing statistics and the entries as planned). Only it, write-orkpack and what follows it depend on
// the budget. The held-out routing the plan is scored against (with a screen text) comes from the
// screen node (heldOutFromScreen).
func (t *Target) planResidency(g *engine.Graph, ws []*weight, routing *engine.Input, boardName string, boardFile *engine.Input) (moePlan, error) {
	m := moePlan{routing: routing}
	res := t.r.Residency
	if res == nil {
		return m, nil
	}
	if routing == nil {
		return m, fmt.Errorf("%w: residency: calibration records routing statistics only for a model with MoE blocks", ErrPlan)
	}
	es, err := packEntries(ws)
	if err != nil {
		return m, err
	}
	p := stages.ResidencyParams{Board: boardName, Budget: res.Spec().String(), Domains: res.Domains}
	for _, e := range es {
		p.Entries = append(p.Entries, stages.PlannedEntry{Name: e.Name, DType: e.DType.String(), K: e.K, N: e.N})
	}
	in := map[string]engine.Input{"routing": *routing}
	if boardFile != nil {
		in["board"] = *boardFile
	}
	o := g.Add("residency", "residency", p, in).Cost(nodeStartNS).Output("residency.json")
	m.residency = &o
	return m, nil
}

// heldOutFromScreen sets sp, the screen node's params (text its text), to also count the float
// model's routing of the text when the build plans residency: the held-out routing the report scores
// the plan against, from the forward passes the screen runs anyway (no separate pass over the text).
func (m *moePlan) heldOutFromScreen(sp *stages.ScreenParams, text string) {
	if m.residency == nil {
		return
	}
	sp.Routing = true
	m.heldOutText = filepath.Base(text)
}

// screenNode records the screen node whose routing.json is the held-out routing (after heldOutFromScreen).
func (m *moePlan) screenNode(sc *engine.Node) {
	if m.heldOutText != "" {
		h := sc.Output("routing.json")
		m.heldOut = &h
	}
}

// bind gives the report what the MoE build has.
func (m moePlan) bind(rp *stages.ReportParams, rin map[string]engine.Input) {
	if m.routing != nil {
		rp.Routing, rin["routing"] = true, *m.routing
	}
	if m.residency != nil {
		rp.Residency, rin["residency"] = true, *m.residency
	}
	if m.heldOut != nil {
		rp.HeldOut, rin["held-out"] = m.heldOutText, *m.heldOut
	}
}

// moeExport is one output an MoE build materializes.
type moeExport struct {
	name string
	in   engine.Input
}

// exports lists routing.json and residency.json, when the build has them.
func (m moePlan) exports() []moeExport {
	var out []moeExport
	if m.routing != nil {
		out = append(out, moeExport{RoutingExport, *m.routing})
	}
	if m.residency != nil {
		out = append(out, moeExport{ResidencyExport, *m.residency})
	}
	return out
}
