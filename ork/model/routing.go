package model

// RouteObserver is an Observer that also sees how the MoE blocks route their tokens. Every MoE block,
// whatever the architecture's gating (softmax, sigmoid with an expert bias, ...), calls ObserveRoute once
// per batch, after the router and before any expert runs, with k = NExpertUsed and, for the T tokens of the
// batch in row order, sel[t·k+j] the j-th expert token t is routed to (in the block's selection order) and
// w[t·k+j] the weight that expert's output gets in token t's result, exactly as the block applies it. A
// lookup is one (token, slot) pair: T·k per block and batch. ObserveRoute must not retain sel or w.
type RouteObserver interface {
	Observer
	ObserveRoute(layer, k int, sel []int, w []float32)
}
