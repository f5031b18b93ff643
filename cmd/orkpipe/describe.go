package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"orkpipe/internal/units"
	"orkpipe/pipelines/verify"
	"orkpipe/registry"
	"orkpipe/stages/reporthtml"
)

type describeFlags struct {
	transportFlags
	trust []string
}

func newDescribeCommand(opts *globalOptions) *cobra.Command {
	var f describeFlags
	cmd := &cobra.Command{
		Use:   "describe REF",
		Short: "Show a pack artifact: manifest, files, sizes, signatures and attached verifications",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDescribe(cmd.Context(), opts, &f, args[0])
		},
	}
	f.register(cmd)
	cmd.Flags().StringArrayVar(&f.trust, "trust", nil, "ed25519 public key file to check attestation signatures against (repeatable)")
	return cmd
}

func runDescribe(ctx context.Context, opts *globalOptions, f *describeFlags, ref string) error {
	ropts, err := f.options(ref)
	if err != nil {
		return err
	}
	tr, err := trustOptions(f.trust)
	if err != nil {
		return err
	}
	ropts = append(ropts, tr...)
	// The provenance, then board verifications, before the other attestations (Describe's bounds).
	ropts = append(ropts, registry.WithLogger(opts.logger), registry.WithPreferredPredicates(registry.PredicateSLSAProvenance, verify.PredicateType))
	d, err := registry.Describe(ctx, ref, ropts...)
	if err != nil {
		return err
	}
	type file struct {
		Name      string            `json:"name"`
		Size      int64             `json:"size"`
		Data      int64             `json:"data"`
		Stored    int64             `json:"stored"`
		SHA256    string            `json:"sha256"`
		BLAKE3    string            `json:"blake3"`
		MediaType string            `json:"mediaType"`
		Title     string            `json:"title"`
		Layer     string            `json:"layer"`
		DiffID    string            `json:"diffId,omitempty"`
		Ranges    int               `json:"ranges"`
		RangeSize int64             `json:"rangeSize,omitempty"`
		Extents   []registry.Extent `json:"extents,omitempty"`
		Extra     map[string]string `json:"annotations,omitempty"`
	}
	type att struct {
		Digest        string   `json:"digest"`
		PredicateType string   `json:"predicateType,omitempty"`
		Signers       []string `json:"signers,omitempty"`
		TrustedBy     []string `json:"trustedBy,omitempty"`
		Error         string   `json:"error,omitempty"`
	}
	var files []file
	for i, fl := range d.Artifact.Files {
		x := file{Name: fl.Name, Size: fl.Digests.Size, Data: fl.DataSize(), Stored: fl.StoredSize(), SHA256: fl.Digests.SHA256,
			BLAKE3: fl.Digests.BLAKE3.String(), MediaType: fl.MediaType(), Title: fl.Title(), Layer: fl.Layer.Digest.String(),
			Ranges: len(fl.Ranges), RangeSize: fl.RangeSize, Extra: fl.Extra}
		if i < len(d.Config.ModelFS.DiffIDs) {
			x.DiffID = d.Config.ModelFS.DiffIDs[i]
		}
		if fl.DataSize() != fl.Digests.Size {
			x.Extents = fl.Extents
		}
		files = append(files, x)
	}
	var atts []att
	for _, a := range d.Attestations {
		x := att{Digest: a.Digest.String(), PredicateType: a.PredicateType, Signers: a.Signers, TrustedBy: a.TrustedBy}
		if a.Err != nil {
			x.Error = a.Err.Error()
		}
		atts = append(atts, x)
	}
	if opts.json {
		return json.NewEncoder(opts.stdout).Encode(map[string]any{
			"ref": ref, "digest": d.Artifact.Digest.String(), "annotations": d.Artifact.Annotations,
			"config": d.Config, "files": files, "attestations": atts, "attestations_not_fetched": d.SkippedAttestations,
			"verifications": verify.Verifications(d),
		})
	}
	w := opts.stdout
	fmt.Fprintf(w, "%s\ndigest   %s\n", ref, d.Artifact.Digest)
	c := d.Config
	if c.Descriptor.CreatedAt != nil {
		fmt.Fprintf(w, "created  %s\n", c.Descriptor.CreatedAt.Format("2006-01-02T15:04:05Z07:00"))
	}
	if line := reporthtml.ModelLine(c.Descriptor.Name, c.Descriptor.Version, c.Config.Architecture, c.Config.ParamSize, c.Config.Precision, c.Config.Quantization); line != "" {
		fmt.Fprintf(w, "model    %s\n", shown(line))
	}
	for _, l := range descriptorLines(c) {
		fmt.Fprintf(w, "%-8s %s\n", l[0], shown(l[1]))
	}
	for _, k := range []string{registry.AnnotationBoardProfile, registry.AnnotationRecipe} {
		if v := d.Artifact.Annotations[k]; v != "" {
			fmt.Fprintf(w, "%s %s\n", k, shown(v))
		}
	}
	fmt.Fprintln(w, "files:")
	for _, x := range files {
		fmt.Fprintf(w, "  %-28s size %10s  data %10s  stored %10s  %d range(s)\n    %s (oras writes it as %s)\n    %s\n    %s\n",
			shown(x.Name), units.FormatSize(x.Size), units.FormatSize(x.Data), units.FormatSize(x.Stored), x.Ranges, shown(x.MediaType), shown(x.Title), x.SHA256, x.BLAKE3)
		if line := residencyLine(x.Extra[registry.AnnotationPackResidency]); line != "" {
			fmt.Fprintf(w, "    %s\n", shown(line))
		}
	}
	fmt.Fprintln(w, "attestations:")
	if len(atts) == 0 && d.SkippedAttestations == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, a := range atts {
		status := "signature not checked (no --trust)"
		switch {
		case a.Error != "":
			status = "INVALID: " + shown(a.Error)
		case len(a.TrustedBy) > 0:
			status = fmt.Sprintf("signed by trusted key %v", shownAll(a.TrustedBy))
		}
		fmt.Fprintf(w, "  %s %s\n    signers %v: %s\n", a.Digest, shown(a.PredicateType), shownAll(a.Signers), status)
	}
	if d.SkippedAttestations > 0 {
		fmt.Fprintf(w, "  %d more listed, not fetched (beyond the first 64, or 64 MiB of envelopes)\n", d.SkippedAttestations)
	}
	if vs := verify.Verifications(d); len(vs) > 0 {
		fmt.Fprintln(w, "board verifications:")
		writeVerifications(w, vs)
	}
	return nil
}

// descriptorLines returns the config descriptor's description of the model that reporthtml.ModelLine does
// not show, as label and value, in a fixed order; fields left empty are left out.
func descriptorLines(c registry.ModelConfig) [][2]string {
	d := c.Descriptor
	var out [][2]string
	for _, l := range [][2]string{
		{"family", d.Family},
		{"authors", strings.Join(d.Authors, ", ")},
		{"vendor", d.Vendor},
		{"license", strings.Join(d.Licenses, ", ")},
		{"about", strings.Join(strings.Fields(d.Description), " ")},
		{"docs", d.DocURL},
		{"source", d.SourceURL},
	} {
		if l[1] != "" {
			out = append(out, l)
		}
	}
	return out
}

// residencyLine describes a pack layer's residency annotation ("" without one, or an unreadable one
// named as such).
func residencyLine(v string) string {
	if v == "" {
		return ""
	}
	var r registry.PackResidency
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return fmt.Sprintf("residency: unreadable annotation %s: %v", registry.AnnotationPackResidency, err)
	}
	return fmt.Sprintf("residency: %d of %d experts resident at start in %d domain(s), budget %s, expected hit rate %.4f (%d of %d routed lookups)",
		r.Hot, r.Experts, r.Domains, units.FormatSize(r.Budget), rateOf(r.HotLookups, r.Lookups), r.HotLookups, r.Lookups)
}

func rateOf(part, all int64) float64 {
	if all == 0 {
		return 0
	}
	return float64(part) / float64(all)
}
