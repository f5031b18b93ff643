package artifacts

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzParseDigest: ParseDigest accepts exactly "blake3:" + 64 lowercase hex, and what it accepts
// prints back identically. Seeds: testdata/fuzz/FuzzParseDigest.
func FuzzParseDigest(f *testing.F) {
	f.Add(SumBytes(nil).String())
	f.Add("blake3:" + SumBytes([]byte("x")).Hex()[:63])
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDigest(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidDigest) {
				t.Fatalf("ParseDigest(%q) error %v does not wrap ErrInvalidDigest", s, err)
			}
			return
		}
		if d.String() != s {
			t.Fatalf("ParseDigest(%q).String() = %q", s, d.String())
		}
		if h, err := ParseHex(d.Hex()); err != nil || h != d {
			t.Fatalf("ParseHex(Hex()) = %v, %v", h, err)
		}
		var u Digest
		if err := u.UnmarshalText([]byte(s)); err != nil || u != d {
			t.Fatalf("UnmarshalText(%q) = %v, %v", s, u, err)
		}
	})
}

// FuzzDecodeActionRecord: decoding never panics; an accepted record is valid, re-encodes, and
// decodes back to the same record. Seeds: testdata/fuzz/FuzzDecodeActionRecord.
func FuzzDecodeActionRecord(f *testing.F) {
	k, d := SumBytes([]byte("k")).String(), SumBytes([]byte("d")).String()
	f.Add([]byte(`{"key":"` + k + `","stage":"tile","version":2,"outputs":[{"name":"pack","digest":"` + d + `","size":10}],"provenance":{"host":"h","start":"2026-01-01T00:00:00Z","end":"2026-01-01T00:01:00Z","orkpipe":{"version":"v1","dirty":true,"binary":"` + d + `"},"tools":{"cc":"` + d + `"}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := DecodeActionRecord(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("error %v does not wrap ErrInvalidRecord", err)
			}
			return
		}
		if err := rec.Validate(); err != nil {
			t.Fatalf("accepted an invalid record: %v", err)
		}
		enc, err := EncodeActionRecord(rec)
		if err != nil {
			t.Fatalf("re-encoding an accepted record: %v", err)
		}
		again, err := DecodeActionRecord(enc)
		if err != nil {
			t.Fatalf("decoding the re-encoded record %s: %v", enc, err)
		}
		a, _ := json.Marshal(rec)
		c, _ := json.Marshal(again)
		if !bytes.Equal(a, c) {
			t.Fatalf("round trip changed the record:\n%s\n%s", a, c)
		}
	})
}

// FuzzDecodeDigests: a digests record (digests.go) decodes without panicking, and what it accepts
// encodes back to the same bytes (one canonical form). Seeds: the records of a one-piece and a
// three-piece object, generated here.
func FuzzDecodeDigests(f *testing.F) {
	for _, b := range [][]byte{pattern("fuzz-small", 1000), pattern("fuzz-pieces", 2*PieceSize+7)} {
		od := ObjectDigests{Object: Object{Digest: SumBytes(b), Size: int64(len(b))}}
		if len(b) > PieceSize {
			for off := 0; off < len(b); off += PieceSize {
				od.Pieces = append(od.Pieces, SubtreeCV(b[off:min(off+PieceSize, len(b))], uint64(off/ChunkSize)))
			}
		}
		rec, err := encodeDigests(od)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(rec)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		od, err := decodeDigests(b)
		if err != nil {
			return
		}
		back, err := encodeDigests(od)
		if err != nil || !bytes.Equal(back, b) {
			t.Fatalf("accepted record re-encodes differently (%v):\n%q\n%q", err, b, back)
		}
	})
}
