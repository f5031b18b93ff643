package nodeexec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"orkpipe/artifacts"
)

// ResultFormat is the "format" field of every result record this package writes and accepts.
const ResultFormat = "orkpipe-node-result 1"

// ResultFile is the name of the result record inside an output directory; OutputsDir the name of
// the directory holding the output files.
const (
	ResultFile = "result.json"
	OutputsDir = "outputs"
)

// maxResultSize bounds a result record read from an export (a record has a few lines per output).
const maxResultSize = 1 << 20

// Result is the result record of one run: what ran, what it produced, where and by which binary.
type Result struct {
	Format  string                  `json:"format"`
	Key     artifacts.Digest        `json:"key"`
	Stage   string                  `json:"stage"`
	Version int                     `json:"version"`
	Outputs []artifacts.NamedObject `json:"outputs"`
	Host    string                  `json:"host"`
	Start   time.Time               `json:"start"`
	End     time.Time               `json:"end"`
	Orkpipe artifacts.OrkpipeBuild  `json:"orkpipe"`

	// Hashed holds, by output name, the stamps of Run's hashes of the outputs (Run's return
	// value only, never in the record): IngestOptions.Hashed hands them to the store so that a
	// file adopted unchanged is not hashed a second time.
	Hashed map[string]artifacts.HashedFile `json:"-"`
}

// Provenance returns the record's host, times and binary as action-record provenance.
func (r Result) Provenance() artifacts.Provenance {
	return artifacts.Provenance{Host: r.Host, Start: r.Start, End: r.End, Orkpipe: r.Orkpipe}
}

// DecodeResult parses a result record strictly: unknown fields, trailing data, another format,
// a zero key, an empty stage, a version below 1, no outputs, an output without a name or digest,
// a negative size or a name given twice are errors wrapping ErrBadResult.
func DecodeResult(b []byte) (Result, error) {
	var r Result
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrBadResult, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Result{}, fmt.Errorf("%w: trailing data after the object", ErrBadResult)
	}
	switch {
	case r.Format != ResultFormat:
		return Result{}, fmt.Errorf("%w: field \"format\": %q, want %q", ErrBadResult, r.Format, ResultFormat)
	case r.Key.IsZero():
		return Result{}, fmt.Errorf("%w: field \"key\": missing", ErrBadResult)
	case r.Stage == "":
		return Result{}, fmt.Errorf("%w: field \"stage\": empty", ErrBadResult)
	case r.Version < 1:
		return Result{}, fmt.Errorf("%w: field \"version\": %d, want >= 1", ErrBadResult, r.Version)
	case len(r.Outputs) == 0:
		return Result{}, fmt.Errorf("%w: field \"outputs\": empty", ErrBadResult)
	}
	seen := map[string]bool{}
	for i, o := range r.Outputs {
		if o.Name == "" || o.Digest.IsZero() || o.Size < 0 || seen[o.Name] {
			return Result{}, fmt.Errorf("%w: field \"outputs\"[%d]: %q: want a unique name, a digest and a size >= 0", ErrBadResult, i, o.Name)
		}
		seen[o.Name] = true
	}
	return r, nil
}

// ReadResult reads and decodes the result record at path.
func ReadResult(path string) (Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrBadResult, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxResultSize+1))
	if err != nil {
		return Result{}, fmt.Errorf("%w: reading %s: %v", ErrBadResult, path, err)
	}
	if len(b) > maxResultSize {
		return Result{}, fmt.Errorf("%w: %s: larger than %d bytes", ErrBadResult, path, maxResultSize)
	}
	r, err := DecodeResult(b)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

func encodeResult(r Result) ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
