// Package reporthtml draws a build for people: report.html (one build), the side-by-side page of
// `orkpipe diff --html` (two builds) and the build timeline (one run of the engine).
//
// # Contract
//
// Every page is one self-contained HTML5 file: inline CSS and inline SVG (each with a viewBox, so it
// scales), no JavaScript, no fonts, images or styles fetched from anywhere, so a page opens offline
// from a pulled artifact. Hover text is SVG <title> elements. Text taken from the inputs (weight
// names, paths, errors) is escaped.
//
// Render and RenderDiff are pure functions of report.json's bytes: the same bytes give the same page,
// byte for byte (no map order, clock, locale or host leaks in). The report stage writes report.html
// with Render from the report.json it has just written, and `orkpipe report DIR|REF` runs the same
// function on the pulled report.json, so both pages are equal whenever the binaries are.
//
// # What is read from report.json
//
// The fields of report.json the pages draw are declared in report.go (the writer is stages.Report);
// fields it does not know are ignored, so a report gaining fields still renders, and optional ones
// are drawn only when present:
//
//   - domain_capacity_bytes: the bytes one IOMMU domain holds (the board profile's ceiling less
//     headroom); without it the domain bars are scaled to the fullest domain, and the page says so.
//   - weights[].promoted_from: the base dtype of an entry write-orkpack promoted to a wider tier.
//   - screen.kld_percentiles: the per-token KL divergence at 0, 1, ..., 100 % (the CDF is drawn from it).
//   - provenance: the resolved dependencies (source model, recipe, corpus, ... and the orkpipe
//     binary, with their BLAKE3 digests) and the --set overrides.
//   - model: what the source's header says of the model (name, architecture, parameter count, the
//     pack's precisions and methods, license, ...: stages.ProvenanceModel); drawn as the page's
//     lead (ModelLine) and a license fact.
//   - routing: MoE routing counts, [{"layer": L, "counts": [tokens routed to expert 0, 1, ...]}];
//     when present the expert grid is coloured by each expert's share of its layer's routing.
//
// The timeline is not in report.json: it differs on every run while report.json is a cached,
// content-addressed output. RenderTimeline draws it from the engine's events of one run (see
// Timeline).
package reporthtml
