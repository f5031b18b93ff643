// Package board describes NPU boards and decides what a pack occupies on one: board profiles, the single
// resident-bytes function, and the IOMMU domain plan.
//
// Import direction: board imports ork/pack (it reads pack.Entry and implements pack.Planner); pack never
// imports board. ResidentBytes is the only authority for an entry's on-board size: PlanDomains calls it, the
// pack writer stores its results in the index through Planner, and CheckPlan recomputes it at verify time.
// PlanDomains needs only each entry's name, dtype and shape, so the build planner runs it on the entries a
// recipe will produce before anything is computed; a plan that does not fit is a *FitError (domains needed
// and available, what a domain holds, the entries too large for one, the largest entries), the same from
// the planner, the writer and verify.
package board

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/zeebo/blake3"

	"orkpipe/ork/pack"
)

// Errors.
var (
	ErrProfile     = errors.New("bad board profile")
	ErrDoesNotFit  = errors.New("plan does not fit the board")
	ErrPlanDiffers = errors.New("stored plan differs from the recomputed one")
)

// Width is how a weight is held in NPU memory.
type Width string

// Resident widths.
const (
	Int4 Width = "int4"
	Int8 Width = "int8"
	FP16 Width = "fp16"
)

// Companion describes the full-K companion buffer the loader builds beside some weights (the board project's
// "Bf"): a weight whose resident width is in Widths gets one when K % KMultiple == 0 and K <= MaxK.
type Companion struct {
	Widths    []Width `json:"widths"`
	KMultiple int     `json:"k_multiple"`
	MaxK      int     `json:"max_k"`
}

// Profile is a board's memory model. All fields are required in a profile file.
type Profile struct {
	Name          string           `json:"name"`
	NPUCores      int              `json:"npu_cores"`
	MaxDomains    int              `json:"max_domains"`          // IOMMU domains the driver allows
	DomainCeiling int64            `json:"domain_ceiling_bytes"` // bytes the loader fills a domain up to
	Headroom      int64            `json:"headroom_bytes"`       // bytes per domain kept free (per-domain scratch)
	PageSize      int              `json:"page_size"`            // allocation granule
	MaxSegmentK   int              `json:"max_segment_k"`        // matmul K limit; larger K is segmented
	Resident      map[string]Width `json:"resident"`             // pack dtype name -> resident width
	Companion     Companion        `json:"companion"`
}

const mib = 1 << 20

// RK3588 returns the built-in profile of the Rockchip RK3588 NPU (facts in DESIGN.md and background/003):
// 3 cores, 16 IOMMU domains (ids 0..15), a 3900 MiB fill ceiling per 4 GiB domain, 4096-byte pages, K segments
// of 8192, I4 and I4_ROT_A8 inflated to int8 at load, a full-K companion for int8 weights with K % 512 == 0
// and K <= 10752. The 32 MiB headroom reserves room for the loader's per-domain scratch buffers.
func RK3588() Profile {
	return Profile{
		Name:          "rk3588",
		NPUCores:      3,
		MaxDomains:    16,
		DomainCeiling: 3900 * mib,
		Headroom:      32 * mib,
		PageSize:      4096,
		MaxSegmentK:   8192,
		Resident: map[string]Width{
			"I4_NATIVE": Int4, "I4": Int8, "I8": Int8, "I8_ROT": Int8, "I4_ROT_A8": Int8, "F16": FP16,
		},
		Companion: Companion{Widths: []Width{Int8}, KMultiple: 512, MaxK: 10752},
	}
}

// Builtin returns a built-in profile by name.
func Builtin(name string) (Profile, bool) {
	if name == "rk3588" {
		return RK3588(), true
	}
	return Profile{}, false
}

// Load returns the built-in profile of that name, or else parses the JSON profile file at nameOrPath.
func Load(nameOrPath string) (Profile, error) {
	if p, ok := Builtin(nameOrPath); ok {
		return p, nil
	}
	data, err := os.ReadFile(nameOrPath)
	if err != nil {
		return Profile{}, fmt.Errorf("%w: %q is not a built-in profile (rk3588) and cannot be read: %v", ErrProfile, nameOrPath, err)
	}
	p, err := Parse(data)
	if err != nil {
		return Profile{}, fmt.Errorf("profile %s: %w", nameOrPath, err)
	}
	return p, nil
}

// Parse decodes a JSON profile strictly (unknown fields, trailing data and missing fields are errors) and
// validates it. Callers holding YAML convert it to JSON first (ork/ does not depend on a YAML library).
func Parse(data []byte) (Profile, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Profile
	if err := dec.Decode(&p); err != nil {
		return Profile{}, fmt.Errorf("%w: %v", ErrProfile, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Profile{}, fmt.Errorf("%w: data after the profile object", ErrProfile)
	}
	if err := p.Validate(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

// Validate checks every field; the error names the field and what was expected.
func (p Profile) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w %q: %s: %s", ErrProfile, p.Name, field, fmt.Sprintf(format, a...))
	}
	if p.Name == "" || len(p.Name) > 255 || strings.IndexFunc(p.Name, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		return bad("name", "%q: want 1..255 printable ASCII characters", p.Name)
	}
	switch {
	case p.NPUCores < 1:
		return bad("npu_cores", "%d: want >= 1", p.NPUCores)
	case p.MaxDomains < 1 || p.MaxDomains > 1<<16:
		return bad("max_domains", "%d: want 1..65536", p.MaxDomains)
	case p.DomainCeiling <= 0:
		return bad("domain_ceiling_bytes", "%d: want > 0", p.DomainCeiling)
	case p.Headroom < 0 || p.Headroom >= p.DomainCeiling:
		return bad("headroom_bytes", "%d: want 0 <= headroom < domain_ceiling_bytes (%d)", p.Headroom, p.DomainCeiling)
	case p.PageSize < 64 || p.PageSize > 1<<30 || p.PageSize&(p.PageSize-1) != 0:
		return bad("page_size", "%d: want a power of two >= 64", p.PageSize)
	case p.MaxSegmentK < 32 || p.MaxSegmentK%32 != 0:
		return bad("max_segment_k", "%d: want a positive multiple of 32", p.MaxSegmentK)
	}
	for _, d := range pack.DTypes {
		w, ok := p.Resident[d.String()]
		if !ok {
			return bad("resident", "no width for dtype %s", d)
		}
		if w != Int4 && w != Int8 && w != FP16 {
			return bad("resident", "%s: width %q: want int4, int8 or fp16", d, w)
		}
	}
	for name := range p.Resident {
		if _, err := pack.ParseDType(name); err != nil || strings.ToUpper(name) != name {
			return bad("resident", "unknown dtype %q", name)
		}
	}
	for _, w := range p.Companion.Widths {
		if w != Int4 && w != Int8 && w != FP16 {
			return bad("companion.widths", "%q: want int4, int8 or fp16", w)
		}
	}
	if len(p.Companion.Widths) > 0 && (p.Companion.KMultiple < 1 || p.Companion.MaxK < 1) {
		return bad("companion", "k_multiple %d, max_k %d: want both >= 1 when widths are listed", p.Companion.KMultiple, p.Companion.MaxK)
	}
	if p.Companion.Widths == nil {
		return bad("companion.widths", "missing: list the widths that get a companion ([] for none)")
	}
	return nil
}

// Digest is the BLAKE3 of the profile's canonical JSON (map keys sorted, companion widths as given).
func (p Profile) Digest() pack.Digest {
	b, err := json.Marshal(p)
	if err != nil { // a Profile always marshals
		panic(err)
	}
	return blake3.Sum256(b)
}

// Capacity is what one domain may hold: the ceiling minus the headroom.
func (p Profile) Capacity() int64 { return p.DomainCeiling - p.Headroom }

func (p Profile) companion(w Width, k int) bool {
	c := p.Companion
	return slices.Contains(c.Widths, w) && k%c.KMultiple == 0 && k <= c.MaxK
}
