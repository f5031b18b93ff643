package registry

import (
	"errors"
	"testing"
)

// FuzzParseManifest parses arbitrary manifests. Seeds: the files in testdata/fuzz/FuzzParseManifest
// (among them the golden manifest, every form, written by TestManifestGolden -update). Anything accepted must be safe for pull to
// act on: plain names, extents inside the file, ranges that tile it and its blob, chaining values
// that merge into the file's BLAKE3.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.cncf.model.manifest.v1+json","config":{"mediaType":"application/vnd.cncf.model.config.v1+json","size":2,"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},"layers":[],"annotations":{"dev.orkpipe.format":"1"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseManifest(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidManifest) && !errors.Is(err, ErrOldLayout) {
				t.Fatalf("error does not wrap ErrInvalidManifest: %v", err)
			}
			return
		}
		for _, file := range a.Files {
			if validName(file.Name) != nil {
				t.Fatalf("accepted file name %q", file.Name)
			}
			end := int64(0)
			for _, e := range file.Extents {
				if e.Off < end || e.Len <= 0 || e.End() > file.Digests.Size {
					t.Fatalf("accepted bad extent %+v in %q (size %d)", e, file.Name, file.Digests.Size)
				}
				end = e.End()
			}
			if err := file.checkRanges(); err != nil {
				t.Fatalf("accepted bad ranges in %q: %v", file.Name, err)
			}
		}
	})
}

func FuzzParseEnvelope(f *testing.F) {
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[{"keyid":"k","sig":"AA=="}]}`))
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJzdWJqZWN0IjpbeyJuYW1lIjoieCIsImRpZ2VzdCI6eyJzaGEyNTYiOiIwMCJ9fV0sInByZWRpY2F0ZVR5cGUiOiJwIiwicHJlZGljYXRlIjp7fX0=","signatures":[{"keyid":"k","sig":"AA=="}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := ParseEnvelope(b)
		if err != nil {
			return
		}
		e.Statement()
		if ids, err := e.Verify(nil); err == nil || len(ids) > 0 {
			t.Fatal("an envelope verified with no trusted keys")
		}
	})
}

func FuzzParseJournalLine(f *testing.F) {
	f.Add("model.orkpack\t3\t9e87dc8d2123d25a2600ec4d7203d50443af3a0b2387e89fb1e1781020e6815b")
	f.Add("model.orkpack\t0\tblake3:9e87dc8d2123d25a2600ec4d7203d50443af3a0b2387e89fb1e1781020e6815b")
	f.Add("../etc\t1\tsha256:00")
	f.Fuzz(func(t *testing.T, line string) {
		if k, ok := parseJournalLine(line); ok && k != line {
			t.Fatalf("accepted line changed: %q -> %q", line, k)
		}
	})
}

func FuzzParsePublicKey(f *testing.F) {
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParsePublicKey(b)
		if err == nil && len(k) != 32 {
			t.Fatalf("accepted a %d-byte ed25519 key", len(k))
		}
	})
}
