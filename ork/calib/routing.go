package calib

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"orkpipe/ork/model"
)

// Routing is how the MoE blocks of a model routed a set of tokens: per MoE layer, how many lookups each
// expert served (a token routed to k experts is one lookup of each) and the weight mass it got (the sum
// of the routing weights of those lookups, as the block applied them). The routing.json file is its JSON
// form (package doc).
type Routing struct {
	Experts int            `json:"n_expert"`
	Used    int            `json:"n_expert_used"`
	Layers  []LayerRouting `json:"layers"`
}

// LayerRouting is the routing of one MoE block.
type LayerRouting struct {
	Layer  int       `json:"layer"`
	Tokens int64     `json:"tokens"`
	Counts []int64   `json:"counts"` // per expert: lookups served
	Mass   []float64 `json:"mass"`   // per expert: Σ routing weight of those lookups
}

// maxRoutingExperts bounds n_expert in a routing file (llama.cpp's LLAMA_MAX_EXPERTS is 512).
const maxRoutingExperts = 4096

// Validate checks the invariants every routing file keeps: a positive expert count and top-k, layers in
// ascending order without repeats, one count and one mass per expert, counts summing to tokens × top-k
// (every token is routed to exactly k distinct experts), masses finite and non-negative, and every layer
// seeing the same tokens.
func (r Routing) Validate() error {
	if r.Experts < 1 || r.Experts > maxRoutingExperts || r.Used < 1 || r.Used > r.Experts {
		return fmt.Errorf("%w: routing: n_expert %d, n_expert_used %d: want 1 <= n_expert_used <= n_expert <= %d", ErrFormat, r.Experts, r.Used, maxRoutingExperts)
	}
	for i, l := range r.Layers {
		if l.Layer < 0 || i > 0 && l.Layer <= r.Layers[i-1].Layer {
			return fmt.Errorf("%w: routing: layer %d after %d: want distinct layers >= 0 in ascending order", ErrFormat, l.Layer, r.Layers[max(i-1, 0)].Layer)
		}
		if len(l.Counts) != r.Experts || len(l.Mass) != r.Experts {
			return fmt.Errorf("%w: routing: layer %d: %d counts and %d masses, want %d (n_expert)", ErrFormat, l.Layer, len(l.Counts), len(l.Mass), r.Experts)
		}
		if l.Tokens < 0 || l.Tokens > math.MaxInt64/int64(r.Used) {
			return fmt.Errorf("%w: routing: layer %d: tokens %d out of range", ErrFormat, l.Layer, l.Tokens)
		}
		var sum int64
		for e, c := range l.Counts {
			if c < 0 || c > l.Tokens {
				return fmt.Errorf("%w: routing: layer %d expert %d: count %d: want 0..tokens (%d)", ErrFormat, l.Layer, e, c, l.Tokens)
			}
			if m := l.Mass[e]; math.IsNaN(m) || math.IsInf(m, 0) || m < 0 {
				return fmt.Errorf("%w: routing: layer %d expert %d: mass %v: want finite and >= 0", ErrFormat, l.Layer, e, m)
			}
			sum += c
		}
		if sum != l.Tokens*int64(r.Used) {
			return fmt.Errorf("%w: routing: layer %d: counts sum to %d, want tokens × n_expert_used = %d × %d", ErrFormat, l.Layer, sum, l.Tokens, r.Used)
		}
		if l.Tokens != r.Layers[0].Tokens {
			return fmt.Errorf("%w: routing: layer %d saw %d tokens, layer %d saw %d: every MoE layer routes the same tokens", ErrFormat, l.Layer, l.Tokens, r.Layers[0].Layer, r.Layers[0].Tokens)
		}
	}
	return nil
}

// Marshal returns the canonical routing.json bytes (indented JSON, a final newline); the same routing
// always gives the same bytes.
func (r Routing) Marshal() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ParseRouting decodes a routing.json strictly (unknown fields, trailing data, missing arrays are errors)
// and validates it; errors wrap ErrFormat and name the file.
func ParseRouting(data []byte, name string) (Routing, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Routing
	if err := dec.Decode(&r); err != nil {
		return Routing{}, fmt.Errorf("%w: routing %s: %v", ErrFormat, name, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Routing{}, fmt.Errorf("%w: routing %s: data after the routing object", ErrFormat, name)
	}
	if r.Layers == nil {
		return Routing{}, fmt.Errorf("%w: routing %s: no layers array", ErrFormat, name)
	}
	if err := r.Validate(); err != nil {
		return Routing{}, fmt.Errorf("routing %s: %w", name, err)
	}
	return r, nil
}

// MergeRouting joins the routings of disjoint layer sets (one per calibration window) into one; they must
// agree on n_expert, n_expert_used and the tokens routed.
func MergeRouting(parts ...Routing) (Routing, error) {
	if len(parts) == 0 {
		return Routing{}, fmt.Errorf("%w: merging routing: no parts", ErrShape)
	}
	out := Routing{Experts: parts[0].Experts, Used: parts[0].Used, Layers: []LayerRouting{}}
	for i, p := range parts {
		if p.Experts != out.Experts || p.Used != out.Used {
			return Routing{}, fmt.Errorf("%w: merging routing: part %d has %d experts top-%d, part 0 %d top-%d", ErrShape, i, p.Experts, p.Used, out.Experts, out.Used)
		}
		out.Layers = append(out.Layers, p.Layers...)
	}
	slices.SortStableFunc(out.Layers, func(a, b LayerRouting) int { return cmp.Compare(a.Layer, b.Layer) })
	if err := out.Validate(); err != nil {
		return Routing{}, fmt.Errorf("merging routing: %w", err)
	}
	return out, nil
}

// Lookups returns every layer's lookups summed: tokens × n_expert_used × MoE layers.
func (r Routing) Lookups() int64 {
	var n int64
	for _, l := range r.Layers {
		n += l.Tokens * int64(r.Used)
	}
	return n
}

// Count returns the lookups expert e of layer served (0 for a layer or expert the routing does not have).
func (r Routing) Count(layer, e int) int64 {
	i, ok := slices.BinarySearchFunc(r.Layers, layer, func(l LayerRouting, want int) int { return cmp.Compare(l.Layer, want) })
	if !ok || e < 0 || e >= len(r.Layers[i].Counts) {
		return 0
	}
	return r.Layers[i].Counts[e]
}

// TopShare returns the share of the layer's lookups served by its ceil(frac × n_expert) most-routed
// experts (0 when it routed no token).
func (l LayerRouting) TopShare(frac float64) float64 {
	return topShare(l.Counts, frac)
}

// TopShare returns the share of all lookups served by the ceil(frac × units) most-routed experts, counting
// every (layer, expert) pair of every MoE layer as one unit.
func (r Routing) TopShare(frac float64) float64 {
	var all []int64
	for _, l := range r.Layers {
		all = append(all, l.Counts...)
	}
	return topShare(all, frac)
}

func topShare(counts []int64, frac float64) float64 {
	s := slices.Clone(counts)
	slices.SortFunc(s, func(a, b int64) int { return cmp.Compare(b, a) })
	n := min(len(s), int(math.Ceil(frac*float64(len(s)))))
	var top, all int64
	for i, c := range s {
		if i < n {
			top += c
		}
		all += c
	}
	if all == 0 {
		return 0
	}
	return float64(top) / float64(all)
}

// RouteCounter is a model.RouteObserver that counts lookups and weight mass per MoE layer and expert.
type RouteCounter struct {
	experts, used int
	layers        map[int]*LayerRouting
	err           error
}

// NewRouteCounter returns a counter for blocks of experts experts routing each token to used of them.
func NewRouteCounter(experts, used int) *RouteCounter {
	return &RouteCounter{experts: experts, used: used, layers: map[int]*LayerRouting{}}
}

// Observe ignores the linear inputs: the counter only sees routing.
func (c *RouteCounter) Observe(int, model.Input, []float32) {}

// ObserveRoute adds one block's routing of a batch (model.RouteObserver).
func (c *RouteCounter) ObserveRoute(layer, k int, sel []int, w []float32) {
	if c.err != nil {
		return
	}
	if k != c.used || len(sel) != len(w) || len(sel)%k != 0 {
		c.err = fmt.Errorf("%w: layer %d: routing of %d selections (%d weights) at top-%d, the model routes top-%d", ErrShape, layer, len(sel), len(w), k, c.used)
		return
	}
	l := c.layers[layer]
	if l == nil {
		l = &LayerRouting{Layer: layer, Counts: make([]int64, c.experts), Mass: make([]float64, c.experts)}
		c.layers[layer] = l
	}
	for t := 0; t < len(sel); t += k {
		for j, e := range sel[t : t+k] {
			if e < 0 || e >= c.experts || slices.Contains(sel[t:t+j], e) {
				c.err = fmt.Errorf("%w: layer %d token %d: selection %v: want %d distinct experts in [0, %d)", ErrShape, layer, l.Tokens, sel[t:t+k], k, c.experts)
				return
			}
			l.Counts[e]++
			l.Mass[e] += float64(w[t+j])
		}
		l.Tokens++
	}
}

// Routing returns what the counter saw, validated.
func (c *RouteCounter) Routing() (Routing, error) {
	if c.err != nil {
		return Routing{}, c.err
	}
	r := Routing{Experts: c.experts, Used: c.used, Layers: []LayerRouting{}}
	for _, l := range c.layers {
		r.Layers = append(r.Layers, *l)
	}
	slices.SortFunc(r.Layers, func(a, b LayerRouting) int { return cmp.Compare(a.Layer, b.Layer) })
	return r, r.Validate()
}

// ObserveRoute forwards an MoE block's routing to the window's counter (Capture records routing).
func (o *observer) ObserveRoute(layer, k int, sel []int, w []float32) {
	if o.routes != nil {
		o.routes.ObserveRoute(layer, k, sel, w)
	}
}
