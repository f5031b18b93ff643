package pack

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
)

// TestReadOldVersions: packs written by earlier versions (the "v1-*" and "v2-*" seeds, as those writers made
// them: oldSeeds) still open, verify and decode; every entry of a version-1 pack reads with
// activation clip 1 (unclipped), and no pack before version 3 has a residency plan.
func TestReadOldVersions(t *testing.T) {
	seeds := fuzzSeeds(t)
	for version, names := range oldSeeds {
		entries := 0
		for _, name := range names {
			b := expandZeros(seeds[name])
			r, err := NewReader(context.Background(), bytesReaderAt(b), int64(len(b)), name)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if r.Version() != version {
				t.Fatalf("%s: version %d, want a version-%d fixture", name, r.Version(), version)
			}
			if err := r.VerifyAll(context.Background()); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if _, ok := r.Residency(); ok {
				t.Errorf("%s: a version-%d pack has a residency plan", name, version)
			}
			for _, e := range r.Entries() {
				entries++
				w, err := r.Load(context.Background(), e.Name)
				if err != nil {
					t.Fatalf("%s: entry %s: %v", name, e.Name, err)
				}
				if version == 1 && (e.ActClip != 1 || w.ActClip != 1) {
					t.Errorf("%s: entry %s: activation clip %v (loaded %v), want 1 for a version-1 pack", name, e.Name, e.ActClip, w.ActClip)
				}
			}
		}
		if entries < 3 {
			t.Fatalf("the version-%d fixtures hold %d entries, want at least 3", version, entries)
		}
	}
}

// recordClipOffset returns where the activation clip (record bytes 100..103) of the first entry sits in a
// pack with one board name and a first entry named name.
func recordClipOffset(b []byte, name string) int {
	io := int(le.Uint64(b[24:]))
	bl := int(le.Uint16(b[io+12:]))
	return io + indexHeaderSize + bl + 2 + len(name) + 100
}

// TestActClipField: the clip field as stored. A version-2 record must hold a ratio in (0, 1] (0, above 1,
// negative, NaN and infinity refused, naming the entry); in a version-1 pack the same four bytes are reserved
// and must be zero.
func TestActClipField(t *testing.T) {
	seeds := fuzzSeeds(t)
	v2 := expandZeros(seeds["clipped"])
	v1 := expandZeros(seeds["v1-one"])
	r1, err := NewReader(context.Background(), bytesReaderAt(v1), int64(len(v1)), "v1")
	if err != nil {
		t.Fatal(err)
	}
	first1 := r1.Entries()[0].Name
	r2, err := NewReader(context.Background(), bytesReaderAt(v2), int64(len(v2)), "v2")
	if err != nil {
		t.Fatal(err)
	}
	var clips []float32
	for _, e := range r2.Entries() {
		clips = append(clips, e.ActClip)
	}
	if len(clips) != 3 || clips[0] != 0x1p-24 || clips[1] != 1 || clips[2] != 0.8125 {
		t.Fatalf("clipped seed: clips %v, want [2^-24 1 0.8125]", clips)
	}
	patch := func(b []byte, name string, bits uint32) []byte {
		c := append([]byte(nil), b...)
		le.PutUint32(c[recordClipOffset(c, name):], bits)
		s, ok := reseal(c)
		if !ok {
			t.Fatal("reseal failed")
		}
		return s
	}
	for _, c := range []struct {
		name string
		pack []byte
		bits uint32
		want string // "" = accepted
	}{
		{"v2 clip 0.5", v2, math.Float32bits(0.5), ""},
		{"v2 clip 1", v2, math.Float32bits(1), ""},
		{"v2 clip 0", v2, 0, "activation clip 0"},
		{"v2 clip -0.5", v2, math.Float32bits(-0.5), "activation clip -0.5"},
		{"v2 clip 1.0000001", v2, math.Float32bits(1) + 1, "activation clip 1.0000001"},
		{"v2 clip NaN", v2, 0x7fc00000, "activation clip NaN"},
		{"v2 clip +Inf", v2, 0x7f800000, "activation clip +Inf"},
		{"v1 reserved 0.5", v1, math.Float32bits(0.5), "reserved bytes are not zero (version 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := "c.0"
			if strings.HasPrefix(c.name, "v1") {
				name = first1
			}
			b := patch(c.pack, name, c.bits)
			r, err := NewReader(context.Background(), bytesReaderAt(b), int64(len(b)), "patched.orkpack")
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if e, _ := r.Entry(name); e.ActClip != math.Float32frombits(c.bits) {
					t.Fatalf("clip %v, want %v", e.ActClip, math.Float32frombits(c.bits))
				}
				return
			}
			if !errors.Is(err, ErrIndex) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), name) {
				t.Fatalf("err = %v, want ErrIndex naming %s and %q", err, name, c.want)
			}
		})
	}
}
