package verify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzProvenance: readProvenance never panics, and what it accepts has plain, unique subject names
// with 64-hex sha256 digests.
func FuzzProvenance(f *testing.F) {
	f.Add([]byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"a.orkpack","digest":{"sha256":"` + strings.Repeat("ab", 32) + `"}}],"predicateType":"x"}`))
	f.Add([]byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"../x","digest":{"sha256":""}}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "provenance.json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		subs, err := readProvenance(p)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, s := range subs {
			if s.Name == "" || strings.ContainsRune(s.Name, '/') || seen[s.Name] || len(s.Digest["sha256"]) != 64 {
				t.Fatalf("accepted subject %+v", s)
			}
			seen[s.Name] = true
		}
	})
}

// FuzzPredicate: DecodePredicate never panics, and an accepted predicate names a board and carries a
// report whose "ok" agrees with its checks.
func FuzzPredicate(f *testing.F) {
	f.Add([]byte(`{"board":"rk3588","profile":"x","report":{"format":"orkpipe.board-verify/v1","ok":true,"checks":[{"name":"pack","ok":true,"detail":""}]}}`))
	f.Add([]byte(`{"board":"","report":{}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, rep, err := DecodePredicate(b)
		if err != nil {
			return
		}
		if p.Board == "" || rep == nil {
			t.Fatalf("accepted %+v / %+v", p, rep)
		}
		for _, c := range rep.Checks {
			if !c.OK && rep.OK() {
				t.Fatalf("report OK with failed check %+v", c)
			}
		}
	})
}

// FuzzRecordedHeader: RecordedHeader never panics and accepts only a valid digest.
func FuzzRecordedHeader(f *testing.F) {
	f.Add([]byte(`{"board":"rk3588","verify":{"stub_header":"blake3:` + strings.Repeat("0f", 32) + `"}}`))
	f.Add([]byte(`{"verify":{"stub_header":"sha256:00"}}`))
	f.Add([]byte(`{"verify":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "report.json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := RecordedHeader(p)
		if err == nil && d.IsZero() {
			t.Fatal("accepted a zero digest")
		}
	})
}
