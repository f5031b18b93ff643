package engine

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"orkpipe/artifacts"
)

// memoMagic opens a build memo file (format: package doc, "Build memo"). Its last byte is the
// format version; memoMagicPrefix followed by another version is a memo of another orkpipe
// (errMemoVersion: a miss, like a memo whose key differs, not a damaged file).
const (
	memoMagicPrefix = "ORKMEMO"
	memoMagic       = memoMagicPrefix + "3"
)

// memoMaxSize bounds a memo file read from disk (a 901-node graph's memo is a few hundred KB).
const memoMaxSize = 256 << 20

// errMemoFormat is wrapped by every reason a memo file does not parse; such a memo is a miss.
var errMemoFormat = errors.New("build memo: bad format")

// errMemoVersion: the file is a memo in another format version (written by another orkpipe); the
// error wraps errMemoFormat too.
var errMemoVersion = errors.New("build memo: another format version")

// memo is the outcome of a finished build of a target, keyed by memoKey: everything its plan and
// its node keys depend on. See the package doc.
type memo struct {
	key     artifacts.Digest
	plan    artifacts.Digest // planKey of the build's BuildOptions.Plan; zero: none given
	nodes   []memoNode
	exports []pexport // node indices into nodes
	tools   []memoTool
	sources []memoTool // every source file of the graph, with the digest the build used
	// records is the build record's node list as a no-op rebuild records it (explain): every node's
	// RecordedNode, outcome cached, as JSON, in node order, separated by commas (without the
	// brackets), so that the record is written from these bytes as they are. They follow the
	// checksummed head of the file, which holds their length and BLAKE3; readMemo leaves them on
	// disk (records nil, recordsOff their offset) and a memo hit copies them into its record.
	records       []byte
	recordsLen    int64
	recordsDigest artifacts.Digest
	recordsOff    int64
}

// memoNode is one node of a memoized build: what its plan and node_cached events say and its
// outputs (each checked to be in the store before the memo is used).
type memoNode struct {
	id, stage string
	key       artifacts.Digest
	sameAs    string
	mem       int64
	deps      []int // indices of earlier nodes
	outputs   []artifacts.NamedObject
}

// memoTool is a file with the digest it had: an external tool some node's key depends on, or a
// source file of the graph.
type memoTool struct {
	path   string
	digest artifacts.Digest
}

// memoHeadSize is the size of a memo file's magic and body length.
const memoHeadSize = len(memoMagic) + 8

// encodeMemo returns the file form of m: magic, body length (uint64 little-endian), body, the
// BLAKE3 of the body, and the records (whose length and BLAKE3 the body holds).
func encodeMemo(m *memo) []byte {
	var b bytes.Buffer
	w := memoWriter{w: &b}
	w.digest(m.key)
	if m.plan.IsZero() {
		w.uint(0)
	} else {
		w.uint(1)
		w.digest(m.plan)
	}
	w.uint(uint64(len(m.nodes)))
	for _, n := range m.nodes {
		w.str(n.id)
		w.str(n.stage)
		w.digest(n.key)
		w.str(n.sameAs)
		w.uint(uint64(n.mem))
		w.uint(uint64(len(n.deps)))
		for _, d := range n.deps {
			w.uint(uint64(d))
		}
		w.uint(uint64(len(n.outputs)))
		for _, o := range n.outputs {
			w.str(o.Name)
			w.digest(o.Digest)
			w.uint(uint64(o.Size))
		}
	}
	w.uint(uint64(len(m.exports)))
	for _, x := range m.exports {
		w.str(x.name)
		w.uint(uint64(x.node))
		w.str(x.output)
	}
	for _, list := range [][]memoTool{m.tools, m.sources} {
		w.uint(uint64(len(list)))
		for _, t := range list {
			w.str(t.path)
			w.digest(t.digest)
		}
	}
	w.uint(uint64(len(m.records)))
	w.digest(artifacts.SumBytes(m.records))
	body := b.Bytes()
	out := make([]byte, 0, memoHeadSize+len(body)+32+len(m.records))
	out = append(out, memoMagic...)
	out = binary.LittleEndian.AppendUint64(out, uint64(len(body)))
	out = append(out, body...)
	out = append(out, artifacts.SumBytes(body).Bytes()...)
	return append(out, m.records...)
}

// decodeMemo parses and verifies a whole memo file: decodeMemoHead, then the records (their length
// and BLAKE3 as the head records them, nothing after them). Any failure wraps errMemoFormat.
func decodeMemo(b []byte) (*memo, error) {
	m, err := decodeMemoHead(b)
	if err != nil {
		return nil, err
	}
	rest := b[m.recordsOff:]
	if int64(len(rest)) != m.recordsLen {
		return nil, fmt.Errorf("%w: %d bytes of records, the memo says %d (truncated or extended)", errMemoFormat, len(rest), m.recordsLen)
	}
	if artifacts.SumBytes(rest) != m.recordsDigest {
		return nil, fmt.Errorf("%w: records checksum mismatch", errMemoFormat)
	}
	m.records = rest
	return m, nil
}

// memoBodyLen returns the body length a memo file's first memoHeadSize bytes state (the magic
// checked; b may be longer).
func memoBodyLen(b []byte) (uint64, error) {
	if len(b) >= len(memoMagic) && string(b[:len(memoMagicPrefix)]) == memoMagicPrefix && string(b[:len(memoMagic)]) != memoMagic {
		return 0, fmt.Errorf("%w: %w: %q, this orkpipe reads %q", errMemoFormat, errMemoVersion, b[:len(memoMagic)], memoMagic)
	}
	if len(b) < memoHeadSize || string(b[:len(memoMagic)]) != memoMagic {
		return 0, fmt.Errorf("%w: no %q header", errMemoFormat, memoMagic)
	}
	return binary.LittleEndian.Uint64(b[len(memoMagic):]), nil
}

// decodeMemoHead parses and verifies the head of a memo file (b holds at least that much): the
// magic, the body length, the body's checksum, then every field (counts within the bytes left,
// dependencies and exports naming earlier or existing nodes, no zero digest, records present when
// there are nodes, no trailing bytes in the body). The records are not read: recordsOff says where
// they start. Any failure wraps errMemoFormat.
func decodeMemoHead(b []byte) (*memo, error) {
	n, err := memoBodyLen(b)
	if err != nil {
		return nil, err
	}
	if n > uint64(len(b)-memoHeadSize) || uint64(len(b)-memoHeadSize)-n < 32 {
		return nil, fmt.Errorf("%w: body length %d, the file holds %d bytes after the header (truncated?)", errMemoFormat, n, len(b)-memoHeadSize)
	}
	body := b[memoHeadSize : memoHeadSize+int(n)]
	if artifacts.SumBytes(body) != digestOf(b[memoHeadSize+int(n):memoHeadSize+int(n)+32]) {
		return nil, fmt.Errorf("%w: checksum mismatch", errMemoFormat)
	}
	r := memoReader{b: body}
	m := &memo{key: r.digest()}
	if r.uint(1) == 1 {
		m.plan = r.digest()
	}
	m.nodes = make([]memoNode, r.count(1+1+32+1+1+1+1))
	for i := range m.nodes {
		nd := &m.nodes[i]
		nd.id, nd.stage = r.str(), r.str()
		nd.key = r.digest()
		nd.sameAs = r.str()
		nd.mem = int64(r.uint(math.MaxInt64))
		nd.deps = make([]int, r.count(1))
		if i == 0 && len(nd.deps) > 0 {
			r.fail("node 0 has dependencies")
		}
		for j := range nd.deps {
			nd.deps[j] = int(r.uint(uint64(i - 1))) // earlier nodes only
		}
		nd.outputs = make([]artifacts.NamedObject, r.count(1+32+1))
		for j := range nd.outputs {
			nd.outputs[j] = artifacts.NamedObject{Name: r.str(), Digest: r.digest(), Size: int64(r.uint(math.MaxInt64))}
		}
		if r.err == nil && (nd.id == "" || nd.stage == "") {
			r.fail(fmt.Sprintf("node %d: empty id or stage", i))
		}
	}
	m.exports = make([]pexport, r.count(1+1+1))
	for i := range m.exports {
		m.exports[i] = pexport{name: r.str(), node: int(r.uint(uint64(max(len(m.nodes)-1, 0)))), output: r.str()}
		if r.err == nil && len(m.nodes) == 0 {
			r.fail("an export without nodes")
		}
	}
	for _, list := range []*[]memoTool{&m.tools, &m.sources} {
		*list = make([]memoTool, r.count(1+32))
		for i := range *list {
			(*list)[i] = memoTool{path: r.str(), digest: r.digest()}
		}
	}
	m.recordsLen = int64(r.uint(math.MaxInt64))
	m.recordsDigest = r.digest()
	m.recordsOff = int64(memoHeadSize + int(n) + 32)
	if r.err == nil && len(m.nodes) > 0 && m.recordsLen == 0 {
		r.fail("no build record of the nodes")
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail(fmt.Sprintf("%d trailing bytes", len(r.b)))
	}
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

func digestOf(b []byte) artifacts.Digest {
	d, _ := artifacts.DigestFromBytes(b) // 32 bytes by construction
	return d
}

// memoWriter writes the fields of a memo body (or of the memo key's input) to w: a bytes.Buffer,
// or a bufio.Writer in front of a hasher (the key is hashed as it is written, never held whole).
type memoWriter struct {
	w interface {
		Write([]byte) (int, error)
		WriteString(string) (int, error)
	}
	tmp [binary.MaxVarintLen64]byte
}

// hashWriter returns a memoWriter whose bytes go to the BLAKE3 hasher h, and the function that
// flushes them and returns their digest.
func hashWriter() (*memoWriter, func() artifacts.Digest) {
	h := artifacts.NewHasher()
	bw := bufio.NewWriterSize(h, 16<<10)
	return &memoWriter{w: bw}, func() artifacts.Digest {
		bw.Flush() // a hasher's Write never fails
		return artifacts.DigestOf(h)
	}
}

func (w *memoWriter) uint(v uint64) { w.w.Write(w.tmp[:binary.PutUvarint(w.tmp[:], v)]) }
func (w *memoWriter) bytes(p []byte) {
	w.uint(uint64(len(p)))
	w.w.Write(p)
}
func (w *memoWriter) str(s string)              { w.uint(uint64(len(s))); w.w.WriteString(s) }
func (w *memoWriter) digest(d artifacts.Digest) { w.w.Write(d.Bytes()) }

// memoReader reads the fields of a memo body; the first error sticks and every later read
// returns a zero value.
type memoReader struct {
	b   []byte
	err error
}

func (r *memoReader) fail(why string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errMemoFormat, why)
	}
	r.b = nil
}

// uint reads a uvarint in its shortest form, no larger than limit.
func (r *memoReader) uint(limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("truncated or overlong varint")
		return 0
	}
	if n != len(binary.AppendUvarint(nil, v)) {
		r.fail("non-minimal varint")
		return 0
	}
	if v > limit {
		r.fail(fmt.Sprintf("value %d above %d", v, limit))
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads an element count; each element takes at least min bytes, so a count the bytes left
// cannot hold is an error (no allocation is sized by an unchecked count).
func (r *memoReader) count(min int) int {
	return int(r.uint(uint64(len(r.b) / min)))
}

func (r *memoReader) bytes() []byte {
	n := r.uint(math.MaxUint64)
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail(fmt.Sprintf("a %d-byte field with %d bytes left", n, len(r.b)))
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

func (r *memoReader) str() string { return string(r.bytes()) }

func (r *memoReader) digest() artifacts.Digest {
	if r.err != nil {
		return artifacts.Digest{}
	}
	if len(r.b) < 32 {
		r.fail("truncated digest")
		return artifacts.Digest{}
	}
	d := digestOf(r.b[:32])
	r.b = r.b[32:]
	if d.IsZero() {
		r.fail("zero digest")
	}
	return d
}
