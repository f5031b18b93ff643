package engine

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"orkpipe/artifacts"
)

func sampleMemo() *memo {
	d := func(s string) artifacts.Digest { return artifacts.SumBytes([]byte(s)) }
	return &memo{
		key:  d("key"),
		plan: d("plan"),
		nodes: []memoNode{
			{id: "a", stage: "synth", key: d("a"), mem: 1 << 20, outputs: []artifacts.NamedObject{{Name: "model.gguf", Digest: d("a.out"), Size: 1234}}},
			{id: "b", stage: "tokenize", key: d("b"), sameAs: "a", deps: []int{0}},
			{id: "c", stage: "report", key: d("c"), mem: 64 << 20, deps: []int{0, 1},
				outputs: []artifacts.NamedObject{{Name: "x", Digest: d("c.x"), Size: 0}, {Name: "y", Digest: d("c.y"), Size: 1 << 40}}},
		},
		exports: []pexport{{name: "pack", node: 2, output: "y"}, {name: "model", node: 0, output: "model.gguf"}},
		tools:   []memoTool{{path: "/usr/bin/orkpipe", digest: d("exe")}},
		sources: []memoTool{{path: "model.gguf", digest: d("model")}, {path: "/srv/corpus.txt", digest: d("corpus")}},
		records: []byte(`{"node":"a"},{"node":"b"},{"node":"c"}`),
	}
}

func TestMemoRoundTrip(t *testing.T) {
	noPlan := sampleMemo()
	noPlan.plan, noPlan.sources = artifacts.Digest{}, nil
	for _, m := range []*memo{sampleMemo(), noPlan} {
		testMemoRoundTrip(t, m)
	}
}

func testMemoRoundTrip(t *testing.T, m *memo) {
	b := encodeMemo(m)
	got, err := decodeMemo(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.recordsLen != int64(len(m.records)) || got.recordsDigest != artifacts.SumBytes(m.records) || got.recordsOff != int64(len(b)-len(m.records)) {
		t.Errorf("records: %d bytes at %d, %s; want %d at %d, %s", got.recordsLen, got.recordsOff, got.recordsDigest, len(m.records), len(b)-len(m.records), artifacts.SumBytes(m.records))
	}
	head, err := decodeMemoHead(b[:got.recordsOff])
	if err != nil || head.records != nil || head.recordsOff != got.recordsOff {
		t.Errorf("decodeMemoHead of the head alone: %v, records %q at %d", err, head.records, head.recordsOff)
	}
	got.recordsLen, got.recordsDigest, got.recordsOff = 0, artifacts.Digest{}, 0
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", m) {
		t.Errorf("decoded\n%+v\nwant\n%+v", got, m)
	}
	if !bytes.Equal(encodeMemo(got), b) {
		t.Error("re-encoding the decoded memo gives other bytes")
	}
}

// TestMemoDamaged: every truncation, every single-bit flip and an appended byte are refused with
// errMemoFormat (the checksum or the structure catches each).
func TestMemoDamaged(t *testing.T) {
	b := encodeMemo(sampleMemo())
	check := func(what string, bad []byte) {
		t.Helper()
		if _, err := decodeMemo(bad); !errors.Is(err, errMemoFormat) {
			t.Fatalf("%s: err %v, want errMemoFormat", what, err)
		}
	}
	for n := range len(b) {
		check(fmt.Sprintf("truncated to %d bytes", n), b[:n])
	}
	for i := range len(b) {
		for bit := range 8 {
			bad := bytes.Clone(b)
			bad[i] ^= 1 << bit
			check(fmt.Sprintf("bit %d of byte %d flipped", bit, i), bad)
		}
	}
	check("a byte appended", append(bytes.Clone(b), 0))
}

// TestMemoOtherVersion: a memo of another format version is errMemoVersion (a silent miss), one
// with a damaged magic only errMemoFormat.
func TestMemoOtherVersion(t *testing.T) {
	b := encodeMemo(sampleMemo())
	old := bytes.Clone(b)
	copy(old, "ORKMEMO1")
	if _, err := decodeMemo(old); !errors.Is(err, errMemoVersion) || !errors.Is(err, errMemoFormat) {
		t.Errorf("version 1 memo: err %v, want errMemoVersion and errMemoFormat", err)
	}
	bad := bytes.Clone(b)
	bad[0] ^= 1
	if _, err := decodeMemo(bad); errors.Is(err, errMemoVersion) || !errors.Is(err, errMemoFormat) {
		t.Errorf("damaged magic: err %v, want errMemoFormat only", err)
	}
}

// TestMemoStructure: bodies with a valid checksum but an impossible structure are refused.
func TestMemoStructure(t *testing.T) {
	for name, mutate := range map[string]func(m *memo){
		"dependency on a later node": func(m *memo) { m.nodes[1].deps = []int{2} },
		"dependency of node 0":       func(m *memo) { m.nodes[0].deps = []int{0} },
		"export of a missing node":   func(m *memo) { m.exports[0].node = 3 },
		"empty node id":              func(m *memo) { m.nodes[1].id = "" },
		"zero output digest":         func(m *memo) { m.nodes[0].outputs[0].Digest = artifacts.Digest{} },
		"zero key":                   func(m *memo) { m.key = artifacts.Digest{} },
		"nodes without records":      func(m *memo) { m.records = nil },
	} {
		m := sampleMemo()
		mutate(m)
		if _, err := decodeMemo(encodeMemo(m)); !errors.Is(err, errMemoFormat) {
			t.Errorf("%s: err %v, want errMemoFormat", name, err)
		}
	}
}

// FuzzDecodeMemo: arbitrary bytes never panic; whatever decodes re-encodes to the same bytes.
func FuzzDecodeMemo(f *testing.F) {
	f.Add(encodeMemo(sampleMemo()))
	f.Add(encodeMemo(&memo{key: artifacts.SumBytes(nil)}))
	f.Add([]byte(memoMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMemo(b)
		if err != nil {
			if !errors.Is(err, errMemoFormat) {
				t.Fatalf("error %v does not wrap errMemoFormat", err)
			}
			return
		}
		if !bytes.Equal(encodeMemo(m), b) {
			t.Fatalf("decoded memo re-encodes to other bytes")
		}
	})
}

// FuzzDecodeMemoBody reaches the structure checks past the checksum: the fuzzer's bytes are the
// body, given a valid header and checksum.
func FuzzDecodeMemoBody(f *testing.F) {
	b := encodeMemo(sampleMemo())
	f.Add(b[len(memoMagic)+8 : len(b)-32])
	f.Fuzz(func(t *testing.T, body []byte) {
		file := append([]byte(memoMagic), make([]byte, 8)...)
		file[len(memoMagic)] = byte(len(body))
		for i := 1; i < 8; i++ {
			file[len(memoMagic)+i] = byte(uint64(len(body)) >> (8 * i))
		}
		file = append(append(file, body...), artifacts.SumBytes(body).Bytes()...)
		m, err := decodeMemo(file)
		if err != nil {
			if !errors.Is(err, errMemoFormat) {
				t.Fatalf("error %v does not wrap errMemoFormat", err)
			}
			return
		}
		for i, n := range m.nodes {
			for _, d := range n.deps {
				if d >= i {
					t.Fatalf("node %d depends on node %d", i, d)
				}
			}
		}
		for _, x := range m.exports {
			if x.node >= len(m.nodes) {
				t.Fatalf("export %q names node %d of %d", x.name, x.node, len(m.nodes))
			}
		}
		if !bytes.Equal(encodeMemo(m), file) {
			t.Fatalf("decoded memo re-encodes to other bytes")
		}
	})
}
