package registry

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// ProvenanceFile is the file of a build directory that holds the build's provenance: an in-toto
// Statement v1 whose predicate is SLSA provenance v1. Push takes `created` from
// predicate.runDetails.metadata.finishedOn, and ModelInfo defaults from
// predicate.buildDefinition.externalParameters.model (same JSON field names as ModelInfo).
const ProvenanceFile = "provenance.json"

// slsaPredicate is the part of SLSA provenance v1 that push reads.
type slsaPredicate struct {
	BuildDefinition struct {
		ExternalParameters struct {
			Model *ModelInfo `json:"model"`
		} `json:"externalParameters"`
	} `json:"buildDefinition"`
	RunDetails struct {
		Metadata struct {
			FinishedOn *time.Time `json:"finishedOn"`
		} `json:"metadata"`
	} `json:"runDetails"`
}

// provenance is a parsed provenance.json.
type provenance struct {
	statement Statement
	created   time.Time
	model     ModelInfo
}

// readProvenance reads and validates path. Missing fields are reported by name.
func readProvenance(path string) (*provenance, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st Statement
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st.Type != StatementTypeV1 {
		return nil, fmt.Errorf("%s: _type %q, want %q", path, st.Type, StatementTypeV1)
	}
	if st.PredicateType != PredicateSLSAProvenance {
		return nil, fmt.Errorf("%s: predicateType %q, want %q", path, st.PredicateType, PredicateSLSAProvenance)
	}
	var p slsaPredicate
	if err := json.Unmarshal(st.Predicate, &p); err != nil {
		return nil, fmt.Errorf("%s: predicate: %w", path, err)
	}
	pv := &provenance{statement: st}
	if t := p.RunDetails.Metadata.FinishedOn; t != nil && !t.IsZero() {
		pv.created = t.UTC()
	}
	if m := p.BuildDefinition.ExternalParameters.Model; m != nil {
		pv.model = *m
	}
	return pv, nil
}

// merge fills the empty fields of m from d.
func (m ModelInfo) merge(d ModelInfo) ModelInfo {
	fill := func(a *string, b string) {
		if *a == "" {
			*a = b
		}
	}
	fill(&m.Name, d.Name)
	fill(&m.Version, d.Version)
	fill(&m.Revision, d.Revision)
	fill(&m.Family, d.Family)
	fill(&m.Author, d.Author)
	fill(&m.Vendor, d.Vendor)
	fill(&m.License, d.License)
	fill(&m.Description, d.Description)
	fill(&m.DocURL, d.DocURL)
	fill(&m.SourceURL, d.SourceURL)
	fill(&m.Architecture, d.Architecture)
	fill(&m.ParamSize, d.ParamSize)
	fill(&m.Precision, d.Precision)
	fill(&m.Quantization, d.Quantization)
	fill(&m.BoardProfile, d.BoardProfile)
	fill(&m.Recipe, d.Recipe)
	return m
}
