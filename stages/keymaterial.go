package stages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"orkpipe/artifacts"
)

// KeyMaterial is everything that determines a node's outputs. Its canonical JSON (Canonical) is
//
//	{"inputs":{"<input name>":"blake3:<hex>",...},"params":{...},"stage":"<name>",
//	 "tools":{"<tool name>":"blake3:<hex>",...},"version":<n>}
//
// ("numerics":"<id>" follows "inputs" when the binary's float arithmetic is not the pure-Go
// kernels' — Numerics: a -tags blas build —, and is absent otherwise) with every object's keys
// sorted (at every depth, params included), no insignificant whitespace, no HTML escaping and
// numbers as Go's encoder writes them from typed structs. The node key is the BLAKE3 of those
// bytes (Key).
type KeyMaterial struct {
	// Fields are declared in key order so that the encoder writes them sorted.
	Inputs map[string]artifacts.Digest `json:"inputs"`
	// Numerics is Numerics() of the binary that computes the key: "" (omitted) for the pure-Go build.
	Numerics string                      `json:"numerics,omitempty"`
	Params   json.RawMessage             `json:"params"`
	Stage    string                      `json:"stage"`
	Tools    map[string]artifacts.Digest `json:"tools"`
	Version  int                         `json:"version"`
}

// Canonical returns the canonical JSON encoding described on KeyMaterial.
func (m KeyMaterial) Canonical() ([]byte, error) {
	if m.Stage == "" {
		return nil, fmt.Errorf("%w: empty stage name", ErrBadKeyMaterial)
	}
	params, err := Canonicalize(m.Params)
	if err != nil {
		return nil, fmt.Errorf("%w: stage %q: params: %v", ErrBadKeyMaterial, m.Stage, err)
	}
	c := m
	c.Params = params
	if c.Inputs == nil {
		c.Inputs = map[string]artifacts.Digest{}
	}
	if c.Tools == nil {
		c.Tools = map[string]artifacts.Digest{}
	}
	b, err := encodeCompact(c)
	if err != nil {
		return nil, fmt.Errorf("%w: stage %q: %v", ErrBadKeyMaterial, m.Stage, err)
	}
	return b, nil
}

// Key returns the BLAKE3 of the canonical encoding.
func (m KeyMaterial) Key() (artifacts.Digest, error) {
	b, err := m.Canonical()
	if err != nil {
		return artifacts.Digest{}, err
	}
	return artifacts.SumBytes(b), nil
}

// DecodeKeyMaterial parses key material strictly: unknown fields, trailing data, invalid digests,
// an empty stage name, a version below 1 or params that are not a canonical JSON object are errors
// wrapping ErrBadKeyMaterial. Whether the params suit the stage kind is checked by Execute.
func DecodeKeyMaterial(b []byte) (KeyMaterial, error) {
	var m KeyMaterial
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return KeyMaterial{}, fmt.Errorf("%w: %v", ErrBadKeyMaterial, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return KeyMaterial{}, fmt.Errorf("%w: trailing data after the object", ErrBadKeyMaterial)
	}
	if m.Stage == "" {
		return KeyMaterial{}, fmt.Errorf("%w: field \"stage\": empty, want a stage kind name", ErrBadKeyMaterial)
	}
	if m.Version < 1 {
		return KeyMaterial{}, fmt.Errorf("%w: field \"version\": %d, want >= 1", ErrBadKeyMaterial, m.Version)
	}
	if len(bytes.TrimSpace(m.Params)) == 0 || bytes.TrimSpace(m.Params)[0] != '{' {
		return KeyMaterial{}, fmt.Errorf("%w: field \"params\": want a JSON object", ErrBadKeyMaterial)
	}
	canon, err := Canonicalize(m.Params)
	if err != nil {
		return KeyMaterial{}, fmt.Errorf("%w: field \"params\": %v", ErrBadKeyMaterial, err)
	}
	if !bytes.Equal(canon, m.Params) {
		return KeyMaterial{}, fmt.Errorf("%w: field \"params\": not in canonical form (sorted keys, no whitespace)", ErrBadKeyMaterial)
	}
	for what, set := range map[string]map[string]artifacts.Digest{"inputs": m.Inputs, "tools": m.Tools} {
		for name, d := range set {
			if err := checkName(name); err != nil {
				return KeyMaterial{}, fmt.Errorf("%w: field %q: %v", ErrBadKeyMaterial, what, err)
			}
			if d.IsZero() {
				return KeyMaterial{}, fmt.Errorf("%w: field %q: %q has no digest", ErrBadKeyMaterial, what, name)
			}
		}
	}
	return m, nil
}

// Canonicalize re-encodes a JSON value with object keys sorted at every depth, no insignificant
// whitespace and no HTML escaping. Numbers keep their text (as the typed encoder wrote them).
func Canonicalize(raw []byte) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return encodeCompact(v)
}

func encodeCompact(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
