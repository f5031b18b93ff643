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
	"path/filepath"
	"strconv"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
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
	if err := s.writable("put action " + rec.Key.String()); err != nil {
		return err
	}
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
// file that is not a valid record of key (it does not decode, fails validation, names another key
// or exceeds the size limit) is never a hit, and is handled as a corrupt object is: it is moved to
// quarantine/, logged at warning level naming the key, the record file and where it went, and this
// lookup fails with an error wrapping ErrInvalidRecord that says so (a miss here: the node runs
// again, as for any unusable record, unless a remote cache serves it); the next lookup is a plain
// miss. A record that cannot be read (an I/O error) is an error naming the file.
func (s *Store) GetAction(ctx context.Context, key Digest) (ActionRecord, error) {
	if err := ctx.Err(); err != nil {
		return ActionRecord{}, err
	}
	if key.IsZero() {
		return ActionRecord{}, fmt.Errorf("get action: %w: zero key", ErrInvalidDigest)
	}
	p := s.actionPath(key)
	rec, ino, err := readAction(p, key)
	if errors.Is(err, ErrInvalidRecord) {
		if err = s.invalidAction(key, p, ino, err); err == nil {
			// Another process quarantined it, or replaced it, meanwhile: what is there now.
			rec, _, err = readAction(p, key)
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return ActionRecord{}, fmt.Errorf("action %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return ActionRecord{}, fmt.Errorf("action %s: %w", key, err)
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

// readAction reads and decodes the action record file p, which must be the record of key (zero:
// whichever key p names). Besides the record it returns the file's inode, also when the record is
// invalid (an error wrapping ErrInvalidRecord), for invalidAction.
func readAction(p string, key Digest) (ActionRecord, uint64, error) {
	f, err := os.Open(p)
	if err != nil {
		return ActionRecord{}, 0, err
	}
	defer f.Close()
	st, err := fstat(f)
	if err != nil {
		return ActionRecord{}, 0, fmt.Errorf("action record %s: %w", p, err)
	}
	if st.Size > maxRecordSize {
		return ActionRecord{}, st.Ino, fmt.Errorf("%w: action record %s is %d bytes, limit %d", ErrInvalidRecord, p, st.Size, maxRecordSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxRecordSize+1))
	if err != nil {
		return ActionRecord{}, st.Ino, fmt.Errorf("reading action record %s: %w", p, err)
	}
	rec, err := DecodeActionRecord(b)
	if err != nil {
		return ActionRecord{}, st.Ino, fmt.Errorf("action record %s: %w", p, err)
	}
	if !key.IsZero() && rec.Key != key {
		return ActionRecord{}, st.Ino, fmt.Errorf("action record %s: %w: field key is %s, want %s (the file's name)", p, ErrInvalidRecord, rec.Key, key)
	}
	return rec, st.Ino, nil
}

// invalidAction handles the action record file p of key that readAction found invalid (why, which
// names p and wraps ErrInvalidRecord): it moves p to quarantine/action-<key hex>.<unix ns>.json, if
// p is still the file that was read (inode ino; a record another process wrote meanwhile is left in
// place), logs a warning naming the key, the record and where it went, and returns why with where it
// went: the error of this lookup, as Open's ErrCorrupt is for a corrupt object. It returns nil when
// the file had already gone or been replaced (GetAction then reads what is there now). A read-only
// Store moves nothing: every lookup of the key then returns why, saying so.
func (s *Store) invalidAction(key Digest, p string, ino uint64, why error) error {
	if s.readOnly {
		return fmt.Errorf("%w; not quarantined: the cache is opened read-only", why)
	}
	q, err := s.quarantineAction(key, p, ino)
	switch {
	case err != nil:
		s.log.Warn("invalid action record could not be quarantined", "key", key.String(), "record", p, "reason", why, "err", err)
		return fmt.Errorf("%w; it could not be quarantined: %v", why, err)
	case q == "":
		return nil
	}
	// The node runs again, or a remote cache serves it: the caller (the engine) says which.
	s.log.Warn("invalid action record quarantined; its lookup is a miss in this cache", "key", key.String(), "record", p, "reason", why, "quarantine", q)
	return fmt.Errorf("%w; moved to %s", why, q)
}

// quarantineAction moves the action record p to quarantine/ if it is still inode ino, and returns
// where it went ("" when it had gone, or had been replaced by another record, which stays).
func (s *Store) quarantineAction(key Digest, p string, ino uint64) (string, error) {
	q := filepath.Join(s.dir, "quarantine", "action-"+key.Hex()+"."+strconv.FormatInt(time.Now().UnixNano(), 10)+".json")
	if err := os.Rename(p, q); errors.Is(err, fs.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	// The rename and the read are not one step: if a PutAction replaced the invalid record in
	// between, the record moved is that new one. Put it back, unless an even newer one is there.
	var st unix.Stat_t
	if err := unix.Lstat(q, &st); err != nil {
		return "", nil // removed meanwhile
	}
	if st.Ino != ino {
		if err := os.Link(q, p); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("putting back the record written meanwhile (%s): %w", q, err)
		}
		os.Remove(q)
		return "", nil
	}
	SyncDir(filepath.Dir(p))
	return q, nil
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
