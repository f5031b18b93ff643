package artifacts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
	"unicode/utf8"
)

// Provenance says where, when and by which binary and tools a node's outputs were made.
// Callers fill Orkpipe from orkpipe/internal/buildinfo.
type Provenance struct {
	Host    string            `json:"host"`
	Start   time.Time         `json:"start,omitzero"`
	End     time.Time         `json:"end,omitzero"`
	Orkpipe OrkpipeBuild      `json:"orkpipe"`
	Tools   map[string]Digest `json:"tools,omitempty"`
}

// OrkpipeBuild identifies the orkpipe binary that ran a node (from internal/buildinfo).
type OrkpipeBuild struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Dirty    bool   `json:"dirty"`
	Binary   Digest `json:"binary,omitzero"`
}

// ActionRecord is the action-cache entry of a node key: the stage that ran, its version, the
// outputs it produced and their provenance. Stored as JSON at actions/<h0h1>/<hex>.json.
type ActionRecord struct {
	Key        Digest        `json:"key"`
	Stage      string        `json:"stage"`
	Version    int           `json:"version"`
	Outputs    []NamedObject `json:"outputs"`
	Provenance Provenance    `json:"provenance"`
}

// maxRecordSize bounds an action record file; real ones are a few KiB.
const maxRecordSize = 16 << 20

// Validate checks the record's fields: a key, a stage name of printable non-space characters, a
// version >= 0, outputs with unique non-empty printable names, valid digests and sizes >= 0, an end
// not before the start and named tools with valid digests.
func (r ActionRecord) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: action record %s: field %s: %s", ErrInvalidRecord, r.Key, field, fmt.Sprintf(format, a...))
	}
	if r.Key.IsZero() {
		return bad("key", "missing, want a blake3 digest")
	}
	if err := checkName(r.Stage); err != nil {
		return bad("stage", "%v", err)
	}
	if r.Version < 0 {
		return bad("version", "%d, want >= 0", r.Version)
	}
	seen := make(map[string]bool, len(r.Outputs))
	for i, o := range r.Outputs {
		if err := checkName(o.Name); err != nil {
			return bad(fmt.Sprintf("outputs[%d].name", i), "%v", err)
		}
		if seen[o.Name] {
			return bad(fmt.Sprintf("outputs[%d].name", i), "duplicate name %q", o.Name)
		}
		seen[o.Name] = true
		if o.Digest.IsZero() {
			return bad(fmt.Sprintf("outputs[%d].digest", i), "missing")
		}
		if o.Size < 0 {
			return bad(fmt.Sprintf("outputs[%d].size", i), "%d, want >= 0", o.Size)
		}
	}
	p := r.Provenance
	if !p.Start.IsZero() && !p.End.IsZero() && p.End.Before(p.Start) {
		return bad("provenance.end", "%s is before start %s", p.End, p.Start)
	}
	for name, d := range p.Tools {
		if err := checkName(name); err != nil {
			return bad("provenance.tools", "%v", err)
		}
		if d.IsZero() {
			return bad("provenance.tools["+name+"]", "missing digest")
		}
	}
	return nil
}

// checkName accepts 1..256 bytes of valid UTF-8 without control characters.
func checkName(s string) error {
	if s == "" || len(s) > 256 {
		return fmt.Errorf("name %q: want 1 to 256 bytes", s)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("name %q: not valid UTF-8", s)
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("name %q: control character %U", s, c)
		}
	}
	return nil
}

// DecodeActionRecord parses one JSON action record strictly (no unknown fields, no trailing
// data, digests validated) and validates it (see ActionRecord.Validate).
func DecodeActionRecord(b []byte) (ActionRecord, error) {
	var r ActionRecord
	if len(b) > maxRecordSize {
		return r, fmt.Errorf("%w: action record is %d bytes, limit %d", ErrInvalidRecord, len(b), maxRecordSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return ActionRecord{}, fmt.Errorf("%w: action record: %w", ErrInvalidRecord, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return ActionRecord{}, fmt.Errorf("%w: action record: trailing data after the JSON object", ErrInvalidRecord)
	}
	if r.Outputs == nil {
		return ActionRecord{}, fmt.Errorf("%w: action record %s: field outputs: missing, want a list (possibly empty)", ErrInvalidRecord, r.Key)
	}
	if err := r.Validate(); err != nil {
		return ActionRecord{}, err
	}
	return r, nil
}

// EncodeActionRecord validates r and returns its JSON form.
func EncodeActionRecord(r ActionRecord) ([]byte, error) {
	if r.Outputs == nil {
		r.Outputs = []NamedObject{}
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding action record %s: %w", r.Key, err)
	}
	return append(b, '\n'), nil
}

func (s *Store) actionPath(key Digest) string { return s.fanPath("actions", key.Hex(), ".json") }

// PutAction stores the record of rec.Key atomically (temp file, fsync, rename), replacing any
// previous record of the key. Every output must already be stored with its recorded size.
func (s *Store) PutAction(ctx context.Context, rec ActionRecord) error {
	b, err := EncodeActionRecord(rec)
	if err != nil {
		return err
	}
	for _, o := range rec.Outputs {
		got, err := s.Stat(ctx, o.Digest)
		if err != nil {
			return fmt.Errorf("put action %s: output %q: %w", rec.Key, o.Name, err)
		}
		if got.Size != o.Size {
			return fmt.Errorf("put action %s: output %q (%s) is %d bytes in the store, record says %d",
				rec.Key, o.Name, o.Digest, got.Size, o.Size)
		}
	}
	if err := s.writeRecord(s.actionPath(rec.Key), b); err != nil {
		return fmt.Errorf("put action %s: %w", rec.Key, err)
	}
	return nil
}

// GetAction returns the record of key. It fails with an error wrapping ErrNotFound on a miss: no
// record, or a record one of whose outputs is missing, quarantined or of the wrong size. A record
// file that does not decode is an error naming the file (never silently a hit).
func (s *Store) GetAction(ctx context.Context, key Digest) (ActionRecord, error) {
	if err := ctx.Err(); err != nil {
		return ActionRecord{}, err
	}
	if key.IsZero() {
		return ActionRecord{}, fmt.Errorf("get action: %w: zero key", ErrInvalidDigest)
	}
	p := s.actionPath(key)
	b, err := readLimited(p, maxRecordSize)
	if errors.Is(err, fs.ErrNotExist) {
		return ActionRecord{}, fmt.Errorf("action %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return ActionRecord{}, fmt.Errorf("action %s: %w", key, err)
	}
	rec, err := DecodeActionRecord(b)
	if err != nil {
		return ActionRecord{}, fmt.Errorf("action record %s: %w", p, err)
	}
	if rec.Key != key {
		return ActionRecord{}, fmt.Errorf("action record %s: %w: field key is %s, want %s", p, ErrInvalidRecord, rec.Key, key)
	}
	for _, o := range rec.Outputs {
		got, err := s.Stat(ctx, o.Digest)
		if err != nil {
			return ActionRecord{}, fmt.Errorf("action %s: output %q: %w", key, o.Name, err)
		}
		if got.Size != o.Size {
			return ActionRecord{}, fmt.Errorf("action %s: %w: output %q (%s) is %d bytes, record says %d",
				key, ErrNotFound, o.Name, o.Digest, got.Size, o.Size)
		}
	}
	return rec, nil
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return b, nil
}
