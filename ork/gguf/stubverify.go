package gguf

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// VerifyOption configures VerifyStub. Options validate themselves.
type VerifyOption func(*verifyConfig) error

type verifyConfig struct {
	sourceDigest *[32]byte
	allowZero    NameSet
}

// WithSourceHeaderDigest makes VerifyStub require the stub's header region digest (see
// File.HeaderDigest) to equal the source's. The zero digest is rejected.
func WithSourceHeaderDigest(d [32]byte) VerifyOption {
	return func(c *verifyConfig) error {
		if d == ([32]byte{}) {
			return fmt.Errorf("gguf: WithSourceHeaderDigest: zero digest")
		}
		c.sourceDigest = &d
		return nil
	}
}

// WithAllowZero names non-owned tensors that are legitimately all zero (e.g. zero biases), so
// VerifyStub accepts them. An empty name is rejected.
func WithAllowZero(names ...string) VerifyOption {
	return func(c *verifyConfig) error {
		if c.allowZero == nil {
			c.allowZero = NameSet{}
		}
		for _, n := range names {
			if n == "" {
				return fmt.Errorf("gguf: WithAllowZero: empty tensor name")
			}
			c.allowZero[n] = struct{}{}
		}
		return nil
	}
}

// StubProblem is one failed check of one tensor.
type StubProblem struct {
	Tensor string
	Reason string
}

func (p StubProblem) String() string { return fmt.Sprintf("tensor %q: %s", p.Tensor, p.Reason) }

// StubReport is what VerifyStub checked and found.
type StubReport struct {
	Path         string
	Tensors      int
	Owned        int
	HeaderDigest [32]byte
	// DataBytes is how many bytes of tensor data the stub holds: the data sizes of its tensors
	// not owned by the pack. A function of the stub's content, like every field but
	// DataBytesRead.
	DataBytes int64
	// DataBytesRead is how many tensor data bytes were read: holes cost nothing, so it depends on
	// how the file is stored (a stub without holes reads its owned tensors too) — a diagnostic,
	// never to be recorded in an output.
	DataBytesRead int64
	Problems      []StubProblem
}

// VerifyStub checks the stub at path against the set of tensors its pack owns:
//   - it parses as GGUF with every tensor's data inside the file (a truncated stub fails);
//   - its header region digest equals the source's, when WithSourceHeaderDigest is given;
//   - every owned name is a tensor of the stub;
//   - every owned tensor's data is all zero (a hole), else it is reported;
//   - every tensor NOT owned is not all zero, unless allowed by WithAllowZero: an all-zero
//     tensor absent from the pack is the signature of a stub used without (or with a
//     mismatched) pack.
//
// Holes are skipped with SEEK_DATA/SEEK_HOLE, never read. The report is returned in every case
// it could be made; the error wraps ErrStub and names the failing tensors.
func VerifyStub(ctx context.Context, path string, owned NameSet, opts ...VerifyOption) (StubReport, error) {
	var cfg verifyConfig
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return StubReport{}, err
		}
	}
	rep := StubReport{Path: path}
	fd, err := os.Open(path)
	if err != nil {
		return rep, fmt.Errorf("%w: %w", ErrStub, err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return rep, err
	}
	f, err := Parse(ctx, fd, st.Size(), path)
	if err != nil {
		return rep, fmt.Errorf("%w: %w", ErrStub, err)
	}
	rep.Tensors = len(f.Tensors)
	if rep.HeaderDigest, err = f.HeaderDigest(ctx); err != nil {
		return rep, err
	}
	if cfg.sourceDigest != nil && *cfg.sourceDigest != rep.HeaderDigest {
		return rep, fmt.Errorf("%w: %s: header region digest blake3:%s differs from the source's blake3:%s: the stub is not of this source",
			ErrStub, path, hex.EncodeToString(rep.HeaderDigest[:]), hex.EncodeToString(cfg.sourceDigest[:]))
	}
	for _, name := range owned.Sorted() {
		if f.TensorIndex(name) < 0 {
			rep.Problems = append(rep.Problems, StubProblem{name, "owned by the pack but not a tensor of the stub"})
		}
	}
	z := &zeroScanner{fd: fd, buf: make([]byte, 1<<20)}
	for _, t := range f.Tensors {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		start, end := f.DataRange(t)
		zero, at, err := z.allZero(ctx, start, end)
		if err != nil {
			return rep, fmt.Errorf("%s: tensor %q: %w", path, t.Name, err)
		}
		switch {
		case owned.Has(t.Name):
			rep.Owned++
			if !zero {
				rep.Problems = append(rep.Problems, StubProblem{t.Name, fmt.Sprintf("owned by the pack but its data is not zero (first non-zero byte at offset %d)", at)})
			}
		default:
			rep.DataBytes += end - start
			if zero && !cfg.allowZero.Has(t.Name) {
				rep.Problems = append(rep.Problems, StubProblem{t.Name, "not owned by the pack and all zero: a stub used without (or with a mismatched) pack"})
			}
		}
	}
	rep.DataBytesRead = z.read
	if len(rep.Problems) > 0 {
		return rep, stubError(path, rep.Problems)
	}
	return rep, nil
}

func stubError(path string, ps []StubProblem) error {
	var b strings.Builder
	const show = 8
	for i, p := range ps[:min(len(ps), show)] {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	if len(ps) > show {
		fmt.Fprintf(&b, "; and %d more", len(ps)-show)
	}
	return fmt.Errorf("%w: %s: %d problem(s): %s", ErrStub, path, len(ps), b.String())
}

// zeroScanner tests file ranges for all-zero content, skipping holes without I/O.
type zeroScanner struct {
	fd   *os.File
	buf  []byte
	read int64
}

// allZero reports whether [start, end) is all zero, and if not the offset of the first
// non-zero byte.
func (z *zeroScanner) allZero(ctx context.Context, start, end int64) (bool, int64, error) {
	for pos := start; pos < end; {
		data, err := nextData(z.fd, pos)
		if err != nil {
			return false, 0, err
		}
		if data < 0 || data >= end {
			return true, 0, nil
		}
		hole, err := nextHole(z.fd, data)
		if err != nil {
			return false, 0, err
		}
		hole = min(hole, end)
		for off := data; off < hole; {
			if err := ctx.Err(); err != nil {
				return false, 0, err
			}
			m := min(int64(len(z.buf)), hole-off)
			b := z.buf[:m]
			if _, err := z.fd.ReadAt(b, off); err != nil {
				return false, 0, err
			}
			z.read += m
			if i := firstNonZero(b); i >= 0 {
				return false, off + int64(i), nil
			}
			off += m
		}
		pos = hole
	}
	return true, 0, nil
}

var zeroBlock [4096]byte

func firstNonZero(b []byte) int {
	for base := 0; base < len(b); base += len(zeroBlock) {
		c := b[base:min(len(b), base+len(zeroBlock))]
		if bytes.Equal(c, zeroBlock[:len(c)]) {
			continue
		}
		for i, x := range c {
			if x != 0 {
				return base + i
			}
		}
	}
	return -1
}
