package build

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"orkpipe/ork/gguf"
	"orkpipe/stages"
)

// sourceMeta is what the provenance says of the source model (stages.ProvenanceModel): its
// general.name (else the file's name), general.architecture, general.size_label (else the
// parameter count, formatted), the parameter count, and the header's description of the model
// (desc: family, author, vendor, license, description, URLs), empty where the header says nothing.
type sourceMeta struct {
	name, arch, sizeLabel string
	params                int64
	desc                  stages.ProvenanceModel
}

// readSourceMeta reads the source's description from its header. Every key is optional; one that
// is present but not a string is an error naming it. The license is general.license as written,
// except Hugging Face's "other" with a general.license.name, which becomes the SPDX reference
// LicenseRef-<name> (model-spec's licenses are SPDX expressions; "other" says nothing).
func readSourceMeta(f *gguf.File, arch string) (sourceMeta, error) {
	m := sourceMeta{arch: arch, params: tensorParams(f.Tensors)}
	var licName string
	for _, k := range []struct {
		key string
		dst *string
	}{
		{"general.name", &m.name},
		{"general.size_label", &m.sizeLabel},
		{"general.basename", &m.desc.Family},
		{"general.author", &m.desc.Author},
		{"general.organization", &m.desc.Vendor},
		{"general.license", &m.desc.License},
		{"general.license.name", &licName},
		{"general.description", &m.desc.Description},
		{"general.url", &m.desc.DocURL},
		{"general.repo_url", &m.desc.SourceURL},
	} {
		v, ok := f.Lookup(k.key)
		if !ok {
			continue
		}
		s, err := v.Str()
		if err != nil {
			return m, fmt.Errorf("%s: key %q: %w", f.Path, k.key, err)
		}
		*k.dst = strings.TrimSpace(s)
	}
	if m.name == "" {
		m.name = strings.TrimSuffix(filepath.Base(f.Path), filepath.Ext(f.Path))
	}
	if strings.EqualFold(m.desc.License, "other") && licName != "" {
		m.desc.License = "LicenseRef-" + spdxIDString(licName)
	}
	return m, nil
}

// spdxIDString makes s an SPDX idstring (letters, digits, "." and "-"): every other character
// becomes "-".
func spdxIDString(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x80 && (r == '.' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return r
		}
		return '-'
	}, s)
}

// tensorParams is the number of values in the tensors ts.
func tensorParams(ts []gguf.TensorInfo) int64 {
	var n int64
	for _, t := range ts {
		n += t.Elements()
	}
	return n
}

// formatParams writes a parameter count as model cards do, to one decimal in the largest unit it
// reaches: 292.8K, 8.3B, 27B; a count that rounds up to 1000 of a unit is written in the next one
// (999,950 is 1M, not 1000K).
func formatParams(n int64) string {
	units := []struct {
		div    float64
		suffix string
	}{{1e3, "K"}, {1e6, "M"}, {1e9, "B"}, {1e12, "T"}}
	for i := len(units) - 1; i >= 0; i-- {
		if float64(n) < units[i].div {
			continue
		}
		v := math.Round(float64(n)/units[i].div*10) / 10
		if v >= 1000 && i+1 < len(units) {
			i++
			v = math.Round(float64(n)/units[i].div*10) / 10
		}
		return strconv.FormatFloat(v, 'f', -1, 64) + units[i].suffix
	}
	return strconv.FormatInt(n, 10)
}

// provenanceModel describes the packed model for the provenance: the source's metadata, the
// precisions of the pack's entries (int4, int8, fp16; joined with "+" in that order when mixed,
// promoted twins included), the quantization methods (gptq, rtn; sorted, "+"-joined) and the board.
func provenanceModel(m sourceMeta, ws []*weight, board string) *stages.ProvenanceModel {
	prec, meth := map[string]bool{}, map[string]bool{}
	add := func(f *stages.FinalizeParams) {
		switch {
		case strings.HasPrefix(f.DType, "I4"):
			prec["int4"] = true
		case strings.HasPrefix(f.DType, "I8"):
			prec["int8"] = true
		case f.DType == "F16":
			prec["fp16"] = true
		default:
			prec[strings.ToLower(f.DType)] = true
		}
		if f.Method != "" && f.Method != "none" {
			meth[f.Method] = true
		}
	}
	for _, w := range ws {
		add(&w.fin)
		if w.promote != nil {
			add(w.promote)
		}
	}
	var precs, other []string
	for _, p := range []string{"int4", "int8", "fp16"} {
		if prec[p] {
			precs = append(precs, p)
			delete(prec, p)
		}
	}
	for p := range prec {
		other = append(other, p)
	}
	slices.Sort(other)
	precs = append(precs, other...)
	var meths []string
	for x := range meth {
		meths = append(meths, x)
	}
	slices.Sort(meths)
	size := m.sizeLabel
	if size == "" && m.params > 0 {
		size = formatParams(m.params)
	}
	pm := m.desc
	pm.Name, pm.Architecture, pm.ParamSize, pm.Precision = m.name, m.arch, size, strings.Join(precs, "+")
	pm.Quantization, pm.BoardProfile = strings.Join(meths, "+"), board
	return &pm
}
