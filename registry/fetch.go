package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"

	"orkpipe/registry/oci"
)

// fetchBuffer is the read size of a part download: each block is hashed by sha256 and BLAKE3 and
// written while it is still in the CPU cache. Pulling 1 GiB (8 interleaved rounds, load 12 on 2
// cores): 16 KiB 5.16 s / 3.07 CPU-s, 64 KiB 4.04 / 2.76, 256 KiB 4.32 / 2.74, 1 MiB 4.31 / 2.98
// (medians); a loop hashing 64 MiB by sha256 and BLAKE3 block by block took half as long with
// 64 KiB blocks as with 1 MiB ones.
const fetchBuffer = 256 << 10

// pullPart downloads part p into fj's partial file, retrying transient failures and corrupt
// transfers, and returns the part's BLAKE3 pieces (nil when the file is not verified by BLAKE3);
// the error names the file, part and layer digest.
func pullPart(ctx context.Context, r *oci.Repo, o *options, fj *fileJob, p Part, downloaded *atomic.Int64) (*partTree, error) {
	var err error
	for attempt := 1; attempt <= o.retries; attempt++ {
		var pt *partTree
		pt, err = fetchPart(ctx, r, o, fj, p, downloaded)
		if err == nil {
			return pt, nil
		}
		if !oci.Transient(err) || ctx.Err() != nil {
			break
		}
		o.logger.Warn("retrying layer download", "file", fj.file.Name, "part", p.Index, "digest", p.Layer.Digest.String(), "attempt", attempt, "err", err)
		oci.Backoff(ctx, attempt)
	}
	return nil, fmt.Errorf("pull %s part %d/%d (layer %s): %w", fj.file.Name, p.Index, len(fj.file.Parts), p.Layer.Digest, err)
}

// fetchPart streams one layer in one pass: each block read is hashed (sha256 of the stored bytes),
// decoded when compressed (sha256 again), hashed into the file's BLAKE3 pieces and written at the
// part's extents. The part counts as verified only if the stored digest and size and the decoded
// digest and size all match; only then are its BLAKE3 pieces returned. Its bytes are not synced
// here (writeback is started as they land): a resumed pull re-hashes journaled parts from disk,
// and the finished file is fsynced before its rename.
func fetchPart(ctx context.Context, r *oci.Repo, o *options, fj *fileJob, p Part, downloaded *atomic.Int64) (*partTree, error) {
	d := p.Layer.Digest.String()
	rr := r.OpenBlob(ctx, d, 0, p.Layer.Size)
	defer rr.Close()
	storedH := sha256.New()
	count := func(n int64) {
		downloaded.Add(n)
		o.progress.Report(Event{Kind: EventBytes, File: fj.file.Name, Bytes: n})
	}
	cr := &countingReader{r: rr}
	er := &errReader{r: cr}
	src := io.TeeReader(&countingReader{r: er, count: count}, storedH)
	_ = cr
	data := src
	var dec *zstd.Decoder
	if p.Compressed() {
		var err error
		if dec, err = zstd.NewReader(src, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true)); err != nil {
			return nil, err
		}
		defer dec.Close()
		data = dec
	}
	// Uncompressed, the decoded bytes are the stored bytes: storedH (fed by the tee) covers both.
	rawH := storedH
	ws := []io.Writer{&extentWriter{f: fj.data, exts: p.Extents, writeback: writebackFunc(fj.data)}}
	if dec != nil {
		rawH = sha256.New()
		ws = append(ws, rawH)
	}
	pt := fj.newPartTree(p.Index)
	if pt != nil {
		ws = append(ws, pt)
	}
	n, copyErr := io.CopyBuffer(io.MultiWriter(ws...), io.LimitReader(data, p.RawSize), make([]byte, fetchBuffer))
	if copyErr == nil && dec != nil {
		var one [1]byte
		if m, _ := io.ReadFull(dec, one[:]); m != 0 {
			copyErr = fmt.Errorf("%w: layer decodes to more than %d bytes", ErrDigestMismatch, p.RawSize)
		}
	}
	var rest int64
	if copyErr == nil || dec != nil {
		rest, _ = io.Copy(io.Discard, src) // hash every stored byte, also after a decode error
	}
	if er.err != nil { // the transfer itself failed (after the reader's own resumptions)
		return nil, er.err
	}
	got := "sha256:" + hex.EncodeToString(storedH.Sum(nil))
	if got != d || cr.n != p.Layer.Size {
		return nil, fmt.Errorf("%w: received %d bytes hashing to %s, want %d bytes %s", ErrDigestMismatch, cr.n, got, p.Layer.Size, d)
	}
	if copyErr != nil {
		// The stored bytes are what the manifest names, yet they do not decode: the artifact is bad.
		return nil, fmt.Errorf("layer content invalid: %v", copyErr)
	}
	if rest != 0 && dec == nil {
		return nil, fmt.Errorf("%w: %d bytes beyond the part's extents", ErrDigestMismatch, rest)
	}
	if raw := "sha256:" + hex.EncodeToString(rawH.Sum(nil)); n != p.RawSize || raw != p.RawSHA256 {
		return nil, fmt.Errorf("layer content invalid: decoded %d bytes hashing to %s, want %d bytes %s", n, raw, p.RawSize, p.RawSHA256)
	}
	if pt != nil {
		pt.close()
	}
	return pt, nil
}

// countingReader counts the bytes read, and reports them when count is set.
type countingReader struct {
	r     io.Reader
	n     int64
	count func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	if k > 0 && c.count != nil {
		c.count(int64(k))
	}
	return k, err
}

// errReader remembers the first non-EOF error of r, to tell a failed transfer from bad content.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}
