package registry

import (
	"context"
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
)

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
	return a, nil
}
