package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"orkpipe/ork/pack"
)

// Pack annotations added by PackAnnotator to every layer of a *.orkpack file.
const (
	AnnotationPackVersion = "dev.orkpipe.pack.version"       // orkpack format version
	AnnotationPackEntries = "dev.orkpipe.pack.entries"       // number of index entries
	AnnotationPackIndex   = "dev.orkpipe.pack.index.blake3"  // BLAKE3 of the pack index
	AnnotationPackBoard   = "dev.orkpipe.pack.board"         // board profile name in the pack's plan
	AnnotationPackProfile = "dev.orkpipe.pack.board.profile" // BLAKE3 of that profile
	// AnnotationPackResidency is an MoE pack's residency plan in brief (docs/orkpack.md 3.1), JSON
	// {"experts","hot","domains","budget_bytes","lookups","hot_lookups"}; absent without one.
	AnnotationPackResidency = "dev.orkpipe.pack.residency"
)

// PackResidency is the value of AnnotationPackResidency.
type PackResidency struct {
	Experts    int   `json:"experts"`
	Hot        int   `json:"hot"`
	Domains    int   `json:"domains"`
	Budget     int64 `json:"budget_bytes"`
	Lookups    int64 `json:"lookups"`
	HotLookups int64 `json:"hot_lookups"`
}

// PackAnnotator is the format-aware Annotator: a file named *.orkpack is opened with ork/pack (header,
// footer and index validated) and annotated with its version, entry count, index digest and board
// profile. A *.orkpack file that is not a valid, supported pack is an error: it is never pushed.
// Other files get no annotations.
var PackAnnotator Annotator = AnnotatorFunc(packAnnotations)

func packAnnotations(ctx context.Context, path string) (map[string]string, error) {
	if !strings.HasSuffix(path, ".orkpack") {
		return nil, nil
	}
	r, err := pack.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("%s: not a valid orkpack: %w", path, err)
	}
	defer r.Close()
	if !pack.Supported(r.Version()) {
		return nil, fmt.Errorf("%s: orkpack version %d is not supported", path, r.Version())
	}
	b := r.Board()
	a := map[string]string{
		AnnotationPackVersion: strconv.FormatUint(uint64(r.Version()), 10),
		AnnotationPackEntries: strconv.Itoa(len(r.Entries())),
		AnnotationPackIndex:   r.IndexDigest().String(),
	}
	if b.Name != "" {
		a[AnnotationPackBoard] = b.Name
	}
	if !b.Profile.IsZero() {
		a[AnnotationPackProfile] = b.Profile.String()
	}
	if res, ok := r.Residency(); ok {
		all, hot := res.Lookups()
		j, err := json.Marshal(PackResidency{Experts: len(res.Experts), Hot: res.Hot, Domains: res.Domains, Budget: res.Budget, Lookups: all, HotLookups: hot})
		if err != nil {
			return nil, err
		}
		a[AnnotationPackResidency] = string(j)
	}
	return a, nil
}
