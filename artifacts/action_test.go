package artifacts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// A record file that is not a valid record of its key (damaged on disk: cut short, a flipped
// byte, garbage, another key's record, too large) is never a hit, and is an error once, as a
// corrupt object is: the first lookup moves it to quarantine/ (its bytes kept there), logs a warning
// naming the key, the record file and the quarantine path, and fails with ErrInvalidRecord saying
// where it went; the next lookup is a plain miss that logs nothing, and the node's next PutAction
// is a hit again. It was ErrInvalidRecord on every lookup, the file left in place. GC quarantines
// such a record the same way.
func TestInvalidActionRecordQuarantined(t *testing.T) {
	ctx := context.Background()
	for _, how := range []string{"cut short", "flipped byte", "garbage", "another key's record", "too large"} {
		t.Run(how, func(t *testing.T) {
			s := openTestStore(t)
			var log syncBuffer
			s.log = slog.New(slog.NewTextHandler(&log, nil))
			rec := testRecord(t, s, []byte("pack bytes"))
			if err := s.PutAction(ctx, rec); err != nil {
				t.Fatal(err)
			}
			p := s.actionPath(rec.Key)
			good, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var bad []byte
			switch how {
			case "cut short":
				bad = good[:len(good)/2]
			case "flipped byte":
				bad = bytes.Clone(good)
				i := bytes.Index(bad, []byte(rec.Outputs[0].Digest.Hex()))
				bad[i] = 'x' // no longer hex: the digest does not parse
			case "garbage":
				bad = pattern("garbage", 300)
			case "another key's record":
				other := rec
				other.Key = SumBytes([]byte("another node"))
				if bad, err = EncodeActionRecord(other); err != nil {
					t.Fatal(err)
				}
			case "too large":
				bad = append(bytes.Clone(good), bytes.Repeat([]byte(" "), maxRecordSize)...)
			}
			if err := os.WriteFile(p, bad, 0o644); err != nil {
				t.Fatal(err)
			}

			_, lookupErr := s.GetAction(ctx, rec.Key)
			q, _ := filepath.Glob(filepath.Join(s.Dir(), "quarantine", "action-"+rec.Key.Hex()+".*.json"))
			if len(q) != 1 {
				t.Fatalf("quarantine holds %v, want the record (lookup: %v)", q, lookupErr)
			}
			if !errors.Is(lookupErr, ErrInvalidRecord) || errors.Is(lookupErr, ErrNotFound) || !strings.Contains(lookupErr.Error(), p) || !strings.Contains(lookupErr.Error(), "moved to "+q[0]) {
				t.Fatalf("lookup of the damaged record: %v, want ErrInvalidRecord naming %s and saying it moved to %s", lookupErr, p, q[0])
			}
			if kept, err := os.ReadFile(q[0]); err != nil || !bytes.Equal(kept, bad) {
				t.Fatalf("quarantined record: %d bytes (%v), want the damaged %d", len(kept), err, len(bad))
			}
			if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the damaged record is still at %s: %v", p, err)
			}
			for _, want := range []string{"invalid action record quarantined", rec.Key.String(), p, q[0]} {
				if !strings.Contains(log.String(), want) {
					t.Fatalf("the warning does not name %q:\n%s", want, log.String())
				}
			}
			logged := log.String()
			_, err = s.GetAction(ctx, rec.Key)
			if !errors.Is(err, ErrNotFound) || err.Error() != fmt.Sprintf("action %s: %v", rec.Key, ErrNotFound) {
				t.Fatalf("second lookup: %v, want a plain miss", err)
			}
			if log.String() != logged {
				t.Fatalf("the second lookup logged again:\n%s", strings.TrimPrefix(log.String(), logged))
			}
			if err := s.PutAction(ctx, rec); err != nil {
				t.Fatal(err)
			}
			if _, err := s.GetAction(ctx, rec.Key); err != nil {
				t.Fatalf("lookup after the node ran again: %v", err)
			}

			// GC, walking the records, quarantines a damaged one too.
			if err := os.WriteFile(p, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			s.Close()
			g := openTestStoreAt(t, s.Dir())
			g.log = s.log
			if _, err := g.GC(ctx, GCOptions{Outdated: func(string, int) bool { return false }}); err != nil {
				t.Fatal(err)
			}
			if q, _ := filepath.Glob(filepath.Join(s.Dir(), "quarantine", "action-"+rec.Key.Hex()+".*.json")); len(q) != 2 {
				t.Fatalf("after GC quarantine holds %v, want both damaged records", q)
			}
			if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("GC left the damaged record at %s: %v", p, err)
			}
		})
	}
}

// A record that another process writes between a lookup's read of a damaged record and its move to
// quarantine is not the one quarantined: it stays in place, and only the damaged bytes (never
// moved here) are reported invalid.
func TestQuarantineActionKeepsARecordWrittenMeanwhile(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	rec := testRecord(t, s, []byte("pack bytes"))
	if err := s.PutAction(ctx, rec); err != nil {
		t.Fatal(err)
	}
	p := s.actionPath(rec.Key)
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	damagedIno := st.Ino
	if err := s.PutAction(ctx, rec); err != nil { // the record written meanwhile: another inode
		t.Fatal(err)
	}
	if q, err := s.quarantineAction(rec.Key, p, damagedIno); err != nil || q != "" {
		t.Fatalf("quarantineAction of a record replaced meanwhile: %q, %v; want nothing moved", q, err)
	}
	if _, err := s.GetAction(ctx, rec.Key); err != nil {
		t.Fatalf("the record written meanwhile: %v", err)
	}
	if q, _ := filepath.Glob(filepath.Join(s.Dir(), "quarantine", "action-*")); len(q) != 0 {
		t.Fatalf("quarantine holds %v", q)
	}
}
