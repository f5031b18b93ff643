package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/goccy/go-yaml"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
)

// packEntryJSON is one entry of `inspect --json` for an orkpack.
type packEntryJSON struct {
	Name          string  `json:"name"`
	DType         string  `json:"dtype"`
	K             int     `json:"k"`
	N             int     `json:"n"`
	Group         int     `json:"group"`
	ActBits       int     `json:"act_bits"`
	ActClip       float32 `json:"act_clip"`
	Bytes         int64   `json:"bytes"`
	ResidentBytes int64   `json:"resident_bytes"`
	Domain        int     `json:"domain"`
	QErr          float64 `json:"qerr"`
}

type packInspectJSON struct {
	Version   uint32             `json:"version"`
	Bytes     int64              `json:"bytes"`
	Entries   []packEntryJSON    `json:"entries"`
	Domains   int                `json:"domains"`
	Board     string             `json:"board"`
	Residency *packResidencyJSON `json:"residency,omitempty"`
}

// packResidencyJSON is an MoE pack's residency section (docs/orkpack.md 3.1) in `inspect --json`: the
// experts in plan order, the first Hot resident at start, the rest in streaming order.
type packResidencyJSON struct {
	Domains    int                `json:"domains"`
	Budget     int64              `json:"budget_bytes"`
	Routing    string             `json:"routing"`
	Hot        int                `json:"hot"`
	Lookups    int64              `json:"lookups"`
	HotLookups int64              `json:"hot_lookups"`
	HitRate    float64            `json:"hit_rate"`
	Experts    []residentExpertJS `json:"experts"`
}

type residentExpertJS struct {
	Layer   int      `json:"layer"`
	Expert  int      `json:"expert"`
	Lookups int64    `json:"lookups"`
	Entries []string `json:"entries"`
}

func residencyJSON(r *pack.Reader) *packResidencyJSON {
	res, ok := r.Residency()
	if !ok {
		return nil
	}
	all, hot := res.Lookups()
	out := &packResidencyJSON{Domains: res.Domains, Budget: res.Budget, Routing: res.Routing.String(), Hot: res.Hot, Lookups: all, HotLookups: hot, HitRate: res.HitRate()}
	for _, x := range res.Experts {
		out.Experts = append(out.Experts, residentExpertJS{Layer: x.Layer, Expert: x.Index, Lookups: x.Lookups, Entries: x.Entries})
	}
	return out
}

// writeResidency prints the residency section: the numbers, then the hot experts and the streaming order
// as block.expert(lookups).
func writeResidency(opts *globalOptions, res *packResidencyJSON) {
	if res == nil {
		return
	}
	fmt.Fprintf(opts.stdout, "residency: %d of %d experts resident at start in %d domain(s), budget %s; expected hit rate %.4f (%d of %d routed lookups of the statistics %s)\n",
		res.Hot, len(res.Experts), res.Domains, mibText(res.Budget), res.HitRate, res.HotLookups, res.Lookups, res.Routing)
	list := func(xs []residentExpertJS) string {
		var b strings.Builder
		for i, x := range xs {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%d.%d(%d)", x.Layer, x.Expert, x.Lookups)
		}
		return b.String()
	}
	fmt.Fprintf(opts.stdout, "  hot (block.expert(lookups)): %s\n  streamed, in order: %s\n", list(res.Experts[:res.Hot]), list(res.Experts[res.Hot:]))
}

// runInspectPack prints an orkpack's entries (name, dtype, K x N, group, activation bits and clip, on-disk
// bytes, resident bytes, domain, qerr) and totals; with --json one object
// {"version","bytes","entries":[{"name","dtype","k","n","group","act_bits","act_clip","bytes","resident_bytes",
// "domain","qerr"}],"domains":N,"board":PROFILE} and, for an MoE pack with a residency plan, "residency"
// (packResidencyJSON). Opening the pack validates header, footer and index; entry data is not read.
func runInspectPack(ctx context.Context, opts *globalOptions, path string) error {
	r, err := pack.Open(ctx, path)
	if err != nil {
		return err
	}
	defer r.Close()
	b := r.Board()
	out := packInspectJSON{Version: r.Version(), Bytes: r.Size(), Domains: b.Domains, Board: b.Name, Entries: []packEntryJSON{}, Residency: residencyJSON(r)}
	for _, e := range r.Entries() {
		out.Entries = append(out.Entries, packEntryJSON{Name: e.Name, DType: e.DType.String(), K: e.K, N: e.N, Group: e.Group,
			ActBits: e.ActBits, ActClip: e.ActClip, Bytes: e.Length, ResidentBytes: e.ResidentBytes, Domain: e.Domain, QErr: e.QErr})
	}
	if opts.json {
		return json.NewEncoder(opts.stdout).Encode(out)
	}
	fmt.Fprintf(opts.stdout, "%s: orkpack v%d, %d bytes, %d entries, board %s (profile %s), %d domains\nindex digest %s\n\n",
		path, r.Version(), r.Size(), len(out.Entries), b.Name, b.Profile, b.Domains, r.IndexDigest())
	tw := tabwriter.NewWriter(opts.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDTYPE\tK x N\tGROUP\tACT\tCLIP\tBYTES\tRESIDENT\tDOMAIN\tQERR")
	var disk, resident int64
	count := map[string]int{}
	for _, e := range out.Entries {
		fmt.Fprintf(tw, "%s\t%s\t%d x %d\t%s\t%d\t%s\t%d\t%d\t%d\t%.5f\n", shown(e.Name), e.DType, e.K, e.N, groupText(e.Group), e.ActBits,
			clipText(e.ActClip), e.Bytes, e.ResidentBytes, e.Domain, e.QErr)
		disk += e.Bytes
		resident += e.ResidentBytes
		count[e.DType]++
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var mix []string
	for _, d := range pack.DTypes {
		if n := count[d.String()]; n > 0 {
			mix = append(mix, fmt.Sprintf("%d %s", n, d))
		}
	}
	fmt.Fprintf(opts.stdout, "\ntotal: %d entries (%s), %s on disk in entries, %s resident in %d domains\n",
		len(out.Entries), strings.Join(mix, ", "), mibText(disk), mibText(resident), b.Domains)
	writeResidency(opts, out.Residency)
	return nil
}

func groupText(g int) string {
	if g == 0 {
		return "channel"
	}
	return fmt.Sprint(g)
}

// clipText shows an activation clip ratio exactly enough to tell grid values apart (0.775, 1).
func clipText(c float32) string { return strconv.FormatFloat(float64(c), 'g', 6, 32) }

func mibText(b int64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }

// packProfile returns the board profile to check or cost the pack r (read from path) against: --board (a
// built-in name or a JSON or YAML file) when given, else the built-in profile the pack was planned for.
func packProfile(r *pack.Reader, path, flag string) (board.Profile, error) {
	if flag == "" {
		name := r.Board().Name
		p, ok := board.Builtin(name)
		if !ok {
			return board.Profile{}, usagef("%s: the pack was planned for board %q, which is not built in: pass --board FILE", path, name)
		}
		return p, nil
	}
	if p, ok := board.Builtin(flag); ok {
		return p, nil
	}
	data, err := os.ReadFile(flag)
	if err != nil {
		return board.Profile{}, usagef("--board %s: not a built-in profile (rk3588) and not readable: %v", flag, err)
	}
	if strings.HasSuffix(flag, ".yaml") || strings.HasSuffix(flag, ".yml") {
		if data, err = yaml.YAMLToJSON(data); err != nil {
			return board.Profile{}, fmt.Errorf("board profile %s: %w", flag, err)
		}
	}
	p, err := board.Parse(data)
	if err != nil {
		return board.Profile{}, fmt.Errorf("board profile %s: %w", flag, err)
	}
	return p, nil
}
