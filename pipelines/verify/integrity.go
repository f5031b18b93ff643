package verify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"orkpipe/artifacts"
	"orkpipe/ork/gguf"
)

// statementV1 is the in-toto Statement type provenance.json must carry.
const statementV1 = "https://in-toto.io/Statement/v1"

type subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

type statement struct {
	Type          string    `json:"_type"`
	Subject       []subject `json:"subject"`
	PredicateType string    `json:"predicateType"`
}

// readProvenance reads the subjects of provenance.json: plain file names (no separators), each
// with a sha256, listed once.
func readProvenance(path string) ([]subject, error) {
	b, err := readBounded(path, maxProvenanceBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProvenance, err)
	}
	var st statement
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrProvenance, path, err)
	}
	if st.Type != statementV1 {
		return nil, fmt.Errorf("%w: %s: field \"_type\" is %q, want %q", ErrProvenance, path, st.Type, statementV1)
	}
	if len(st.Subject) == 0 {
		return nil, fmt.Errorf("%w: %s: field \"subject\" is empty", ErrProvenance, path)
	}
	seen := map[string]bool{}
	for i, s := range st.Subject {
		if s.Name == "" || s.Name != filepath.Base(s.Name) || s.Name == "." || s.Name == ".." {
			return nil, fmt.Errorf("%w: %s: subject[%d].name %q is not a plain file name", ErrProvenance, path, i, s.Name)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("%w: %s: subject %q listed twice", ErrProvenance, path, s.Name)
		}
		seen[s.Name] = true
		if h, err := hex.DecodeString(s.Digest["sha256"]); err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("%w: %s: subject %q: field digest.sha256 %q is not 64 hex digits", ErrProvenance, path, s.Name, s.Digest["sha256"])
		}
		if b3, ok := s.Digest["blake3"]; ok {
			if _, err := artifacts.ParseHex(b3); err != nil {
				return nil, fmt.Errorf("%w: %s: subject %q: field digest.blake3: %v", ErrProvenance, path, s.Name, err)
			}
		}
	}
	return st.Subject, nil
}

// checkProvenance hashes every subject of provenance.json (sha256 and BLAKE3 in one streaming pass,
// jobs files at a time) and compares; the pack, the stub and report.json must be subjects.
func checkProvenance(ctx context.Context, f Files, jobs int) error {
	subs, err := readProvenance(f.Provenance)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for _, s := range subs {
		names[s.Name] = true
	}
	var errs []error
	for _, p := range []string{f.Pack, f.Stub, f.Report} {
		if !names[filepath.Base(p)] {
			errs = append(errs, fmt.Errorf("%s is not a subject of %s: nothing vouches for its bytes", filepath.Base(p), f.Provenance))
		}
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(jobs)
	for _, s := range subs {
		g.Go(func() error {
			if err := checkSubject(gctx, filepath.Join(f.Dir, s.Name), s); err != nil {
				if gctx.Err() != nil {
					return gctx.Err()
				}
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrProvenance, errors.Join(errs...))
	}
	return nil
}

// unlisted returns the regular files of f.Dir that are not subjects of provenance.json, sorted,
// leaving out provenance.json and orkpipe's own hidden files (".orkpipe-*": a build's timeline,
// temporary files); nil when provenance.json cannot be read (checkProvenance reports that).
func unlisted(f Files) ([]string, error) {
	subs, err := readProvenance(f.Provenance)
	if err != nil {
		return nil, nil
	}
	listed := map[string]bool{filepath.Base(f.Provenance): true}
	for _, s := range subs {
		listed[s.Name] = true
	}
	ents, err := os.ReadDir(f.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrLayout, err)
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && !listed[e.Name()] && !strings.HasPrefix(e.Name(), ".orkpipe-") {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func checkSubject(ctx context.Context, path string, s subject) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("subject %q: %w", s.Name, err)
	}
	defer fh.Close()
	sh, bh := sha256.New(), artifacts.NewHasher()
	if _, err := copyCtx(ctx, io.MultiWriter(sh, bh), fh); err != nil {
		return fmt.Errorf("subject %q: reading %s: %w", s.Name, path, err)
	}
	var bad []string
	if got := hex.EncodeToString(sh.Sum(nil)); got != strings.ToLower(s.Digest["sha256"]) {
		bad = append(bad, fmt.Sprintf("sha256 %s, provenance records %s", got, s.Digest["sha256"]))
	}
	if want, ok := s.Digest["blake3"]; ok {
		if got := artifacts.DigestOf(bh).Hex(); got != strings.ToLower(want) {
			bad = append(bad, fmt.Sprintf("blake3 %s, provenance records %s", got, want))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s: %s", path, strings.Join(bad, "; "))
	}
	return nil
}

// copyCtx copies r to w in 1 MiB pieces, checking ctx between them.
func copyCtx(ctx context.Context, w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, err := r.Read(buf)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// buildRecord is the part of report.json verify reads.
type buildRecord struct {
	Board  string `json:"board"`
	Verify struct {
		StubHeader string `json:"stub_header"`
	} `json:"verify"`
}

// RecordedHeader returns the stub header digest the build recorded in report.json (field
// verify.stub_header): the BLAKE3 of the source model's header region, which the build's
// verify-local node checked the stub against.
func RecordedHeader(reportPath string) (artifacts.Digest, error) {
	b, err := ReadReportJSON(reportPath)
	if err != nil {
		return artifacts.Digest{}, fmt.Errorf("%w: %v", ErrRecorded, err)
	}
	var rec buildRecord
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&rec); err != nil {
		return artifacts.Digest{}, fmt.Errorf("%w: %s: %v", ErrRecorded, reportPath, err)
	}
	if rec.Verify.StubHeader == "" {
		return artifacts.Digest{}, fmt.Errorf("%w: %s: field verify.stub_header is missing: the build did not record the source header digest", ErrRecorded, reportPath)
	}
	d, err := artifacts.ParseDigest(rec.Verify.StubHeader)
	if err != nil {
		return artifacts.Digest{}, fmt.Errorf("%w: %s: field verify.stub_header: %v", ErrRecorded, reportPath, err)
	}
	return d, nil
}

func checkStubHeader(ctx context.Context, f Files) error {
	want, err := RecordedHeader(f.Report)
	if err != nil {
		return err
	}
	g, err := gguf.Open(ctx, f.Stub)
	if err != nil {
		return err
	}
	defer g.Close()
	h, err := g.HeaderDigest(ctx)
	if err != nil {
		return err
	}
	got, err := artifacts.DigestFromBytes(h[:])
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("stub %s: header region [0, %d) hashes to %s, but %s records the source header %s (verify.stub_header)",
			f.Stub, g.DataOffset, got, f.Report, want)
	}
	return nil
}

// The most bytes a build directory's JSON files are read into memory with: far above what a build
// writes (a 27B model's report.json is about a megabyte; provenance.json names a handful of files), far
// below a sparse file's claim (a pulled artifact may declare a 10 GiB report.json of one byte).
const (
	maxReportBytes     = 64 << 20
	maxProvenanceBytes = 16 << 20
)

// ReadReportJSON reads a build's report.json, refusing one larger than a build writes (64 MiB).
func ReadReportJSON(path string) ([]byte, error) { return readBounded(path, maxReportBytes) }

// readBounded reads the file at path whole, or fails naming its size when it is larger than limit.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a build writes there", path, st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: more than the %d bytes a build writes there", path, limit)
	}
	return b, nil
}
