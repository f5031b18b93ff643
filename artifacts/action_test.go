package artifacts

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func testRecord(t *testing.T, s *Store, outs ...[]byte) ActionRecord {
	t.Helper()
	rec := ActionRecord{
		Key:     SumBytes([]byte("node key " + t.Name())),
		Stage:   "tile",
		Version: 3,
		Outputs: []NamedObject{},
	}
	for i, b := range outs {
		o := mustIngest(t, s, b)
		rec.Outputs = append(rec.Outputs, NamedObject{Name: string(rune('a' + i)), Digest: o.Digest, Size: o.Size})
	}
	rec.Provenance.Host = "build-1"
	rec.Provenance.Start = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	rec.Provenance.End = rec.Provenance.Start.Add(time.Minute)
	rec.Provenance.Orkpipe.Version = "(devel)"
	rec.Provenance.Orkpipe.Binary = SumBytes([]byte("binary"))
	rec.Provenance.Tools = map[string]Digest{"llama-quantize": SumBytes([]byte("tool"))}
	return rec
}

func TestActionRoundTrip(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	rec := testRecord(t, s, []byte("pack bytes"), []byte("stub bytes"))
	if _, err := s.GetAction(ctx, rec.Key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetAction before Put: %v, want ErrNotFound", err)
	}
	if err := s.PutAction(ctx, rec); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetAction(ctx, rec.Key)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(rec)
	if string(a) != string(b) {
		t.Fatalf("GetAction = %s\nwant %s", a, b)
	}
}

func TestActionMissingOutputIsMiss(t *testing.T) {
	ctx := context.Background()
	for _, how := range []string{"removed", "corrupt", "wrong size"} {
		t.Run(how, func(t *testing.T) {
			s := openTestStore(t)
			rec := testRecord(t, s, pattern("out", 70000), []byte("second"))
			if err := s.PutAction(ctx, rec); err != nil {
				t.Fatal(err)
			}
			d := rec.Outputs[0].Digest
			switch how {
			case "removed":
				if err := os.Remove(s.objectPath(d)); err != nil {
					t.Fatal(err)
				}
			case "corrupt":
				flipByte(t, s, d, 5)
				if _, err := readAll(t, s, d); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("read of flipped object: %v", err)
				}
			case "wrong size":
				rec.Outputs[0].Size++
				b, err := json.Marshal(rec)
				if err != nil {
					t.Fatal(err)
				}
				os.WriteFile(s.actionPath(rec.Key), b, 0o644)
			}
			_, err := s.GetAction(ctx, rec.Key)
			wantErrIs(t, err, ErrNotFound)
			if !strings.Contains(err.Error(), d.String()) {
				t.Fatalf("miss %q does not name the output", err)
			}
		})
	}
}

func TestPutActionRefusesMissingOutput(t *testing.T) {
	s := openTestStore(t)
	rec := testRecord(t, s)
	rec.Outputs = []NamedObject{{Name: "pack", Digest: SumBytes([]byte("never stored")), Size: 12}}
	wantErrIs(t, s.PutAction(context.Background(), rec), ErrNotFound)
	if _, err := os.Stat(s.actionPath(rec.Key)); !os.IsNotExist(err) {
		t.Fatalf("record written anyway: %v", err)
	}
}

func TestDecodeActionRecordStrict(t *testing.T) {
	s := openTestStore(t)
	good, err := EncodeActionRecord(testRecord(t, s, []byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeActionRecord(good); err != nil {
		t.Fatalf("good record: %v", err)
	}
	k := SumBytes([]byte("k")).String()
	d := SumBytes([]byte("d")).String()
	for _, tc := range []struct{ name, json, want string }{
		{"unknown field", `{"key":"` + k + `","stage":"s","version":1,"outputs":[],"provenance":{"host":"h","orkpipe":{"version":"v","dirty":false}},"extra":1}`, "unknown field"},
		{"trailing data", string(good) + "{}", "trailing"},
		{"bad key", `{"key":"sha256:00","stage":"s","version":1,"outputs":[],"provenance":{}}`, "invalid digest"},
		{"no key", `{"stage":"s","version":1,"outputs":[],"provenance":{}}`, "field key"},
		{"no stage", `{"key":"` + k + `","version":1,"outputs":[],"provenance":{}}`, "field stage"},
		{"negative version", `{"key":"` + k + `","stage":"s","version":-1,"outputs":[],"provenance":{}}`, "field version"},
		{"no outputs", `{"key":"` + k + `","stage":"s","version":1,"provenance":{}}`, "field outputs"},
		{"duplicate output", `{"key":"` + k + `","stage":"s","version":1,"outputs":[{"name":"a","digest":"` + d + `","size":1},{"name":"a","digest":"` + d + `","size":1}],"provenance":{}}`, "duplicate"},
		{"negative size", `{"key":"` + k + `","stage":"s","version":1,"outputs":[{"name":"a","digest":"` + d + `","size":-1}],"provenance":{}}`, "size"},
		{"output without digest", `{"key":"` + k + `","stage":"s","version":1,"outputs":[{"name":"a","size":1}],"provenance":{}}`, "digest"},
		{"end before start", `{"key":"` + k + `","stage":"s","version":1,"outputs":[],"provenance":{"start":"2026-01-02T00:00:00Z","end":"2026-01-01T00:00:00Z"}}`, "before start"},
		{"control char in stage", `{"key":"` + k + `","stage":"a\u0001","version":1,"outputs":[],"provenance":{}}`, "control"},
		{"not json", `not json`, "invalid record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeActionRecord([]byte(tc.json))
			if err == nil || !errors.Is(err, ErrInvalidRecord) && !errors.Is(err, ErrInvalidDigest) {
				t.Fatalf("DecodeActionRecord = %v, want an invalid-record error", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}
