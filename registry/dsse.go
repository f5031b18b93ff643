package registry

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strconv"
)

// In-toto / DSSE constants.
const (
	PayloadTypeInToto       = "application/vnd.in-toto+json"
	StatementTypeV1         = "https://in-toto.io/Statement/v1"
	PredicateSLSAProvenance = "https://slsa.dev/provenance/v1"
)

// Statement is an in-toto Statement v1.
type Statement struct {
	Type          string          `json:"_type"`
	Subject       []Subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"`
}

// Subject is one artifact a statement is about.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// Envelope is a DSSE envelope (payload and sig are base64 in JSON).
type Envelope struct {
	PayloadType string      `json:"payloadType"`
	Payload     []byte      `json:"payload"`
	Signatures  []Signature `json:"signatures"`
}

// Signature is one DSSE signature.
type Signature struct {
	KeyID string `json:"keyid"`
	Sig   []byte `json:"sig"`
}

// pae is the DSSE v1 pre-authentication encoding that is actually signed.
func pae(payloadType string, payload []byte) []byte {
	b := []byte("DSSEv1 " + strconv.Itoa(len(payloadType)) + " " + payloadType + " " + strconv.Itoa(len(payload)) + " ")
	return append(b, payload...)
}

// SignStatement serializes st and signs it into a DSSE envelope. ed25519 is deterministic, so the
// same statement and key give the same envelope.
func SignStatement(st Statement, key ed25519.PrivateKey) (*Envelope, error) {
	payload, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	pub := key.Public().(ed25519.PublicKey)
	sig := ed25519.Sign(key, pae(PayloadTypeInToto, payload))
	return &Envelope{PayloadType: PayloadTypeInToto, Payload: payload, Signatures: []Signature{{KeyID: KeyID(pub), Sig: sig}}}, nil
}

// ParseEnvelope decodes a DSSE envelope carrying an in-toto statement and checks its shape (not its
// signatures: see Verify).
func ParseEnvelope(b []byte) (*Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("DSSE envelope: %w", err)
	}
	if e.PayloadType != PayloadTypeInToto {
		return nil, fmt.Errorf("DSSE envelope: payloadType %q, want %q", e.PayloadType, PayloadTypeInToto)
	}
	if len(e.Signatures) == 0 {
		return nil, fmt.Errorf("DSSE envelope: no signatures")
	}
	return &e, nil
}

// Statement decodes the payload as an in-toto Statement v1.
func (e *Envelope) Statement() (*Statement, error) {
	var st Statement
	if err := json.Unmarshal(e.Payload, &st); err != nil {
		return nil, fmt.Errorf("in-toto statement: %w", err)
	}
	if st.Type != StatementTypeV1 {
		return nil, fmt.Errorf("in-toto statement: _type %q, want %q", st.Type, StatementTypeV1)
	}
	if st.PredicateType == "" || len(st.Subject) == 0 {
		return nil, fmt.Errorf("in-toto statement: missing predicateType or subject")
	}
	return &st, nil
}

// Verify returns the IDs of the trusted keys that produced a valid signature over the envelope;
// an error wrapping ErrUntrusted when there is none (naming the key IDs that signed instead).
func (e *Envelope) Verify(trusted []ed25519.PublicKey) ([]string, error) {
	msg := pae(e.PayloadType, e.Payload)
	var ok []string
	var seen []string
	for _, s := range e.Signatures {
		seen = append(seen, s.KeyID)
		for _, k := range trusted {
			if ed25519.Verify(k, msg, s.Sig) {
				ok = append(ok, KeyID(k))
				break
			}
		}
	}
	if len(ok) == 0 {
		return nil, fmt.Errorf("%w: signatures by %v do not verify with the trusted keys (altered payload or untrusted key)", ErrUntrusted, seen)
	}
	return ok, nil
}
