package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"

	"orkpipe/artifacts"
	"orkpipe/artifacts/sparse"
	"orkpipe/registry/oci"
)

// When a file travels as an archive instead of raw: its holes are left out only when that saves
// at least sparseMinHoles bytes and a sparseMinShare-th of the file (a pack's page padding does
// not make it an archive); it is compressed only when a sample of its data compresses below
// compressWhenBelow and that saves at least compressMinSaving bytes (a report of a few KiB stays
// raw, readable by every OCI client as it is).
const (
	sparseMinHoles    = 1 << 20
	sparseMinShare    = 16
	compressWhenBelow = 0.90
	compressMinSaving = 1 << 20
	sampleWindows     = 8
	sampleWindowSize  = 128 << 10
)

// DigestSource gives the digests of a file about to be pushed: its size, sha256, BLAKE3 and BLAKE3
// piece values. artifacts.Store implements it (FileDigests: remembered beside the stored object, so
// that a build output is hashed at most once); without one, push hashes each file once.
type DigestSource interface {
	FileDigests(ctx context.Context, path string) (artifacts.ObjectDigests, error)
}

// digestForgetter is a DigestSource that remembers digests (artifacts.Store): a sha256 the registry
// refused for a file's bytes is forgotten, so that the next push hashes the file again.
type digestForgetter interface {
	ForgetDigests(d artifacts.Digest)
}

type hashFiles struct{}

func (hashFiles) FileDigests(ctx context.Context, path string) (artifacts.ObjectDigests, error) {
	return artifacts.HashDigests(ctx, path)
}

// newEncoder returns the one zstd configuration used for layers. Push compresses a range once to
// hash it and again to upload it, so the encoder must be deterministic: one goroutine, fixed
// level, no dictionary.
func newEncoder(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
}

// encodeFrame writes src as one zstd frame to dst and returns the bytes read from src. The
// encoder's output depends on how its input is chunked, so the chunking is fixed here: reads of at
// most 1 MiB, each written once.
func encodeFrame(dst io.Writer, src io.Reader) (int64, error) {
	enc, err := newEncoder(dst)
	if err != nil {
		return 0, err
	}
	n, err := io.CopyBuffer(struct{ io.Writer }{enc}, struct{ io.Reader }{src}, make([]byte, 1<<20))
	if cerr := enc.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// localFile is a file being pushed: its layout, where its bytes are, and its identity when its
// digests were taken.
type localFile struct {
	path string
	File
	st   os.FileInfo
	segs []segment // the tar forms' segments
}

// classOf says which ModelPack family a file belongs to: documents are the reports, provenance and
// summary (JSON, text, Markdown, HTML); everything else (pack, stub) is a weight.
func classOf(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".json", ".txt", ".md", ".html":
		return ClassDoc
	}
	return ClassWeight
}

// prepareFile lays out one file: its digests (from src: remembered by the store, or one read),
// its data extents (SEEK_DATA/SEEK_HOLE), its form (raw, or tar where leaving holes out or
// compressing pays), its ranges and their chaining values (merged from the BLAKE3 piece values,
// no hashing) and, for a tar form, the archive's digests (one pass over the data, the ranges
// compressed in parallel). A raw layer is the file itself: its digest is the file's sha256.
func prepareFile(ctx context.Context, path string, o *options, slots chan struct{}) (*localFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	od, err := o.digests.FileDigests(ctx, path)
	if err != nil {
		return nil, err
	}
	if od.Size != st.Size() {
		return nil, fmt.Errorf("%s: %d bytes, but its digests are of %d bytes (changed meanwhile?)", path, st.Size(), od.Size)
	}
	size := st.Size()
	exts, err := sparse.DataExtents(f, size)
	if err != nil {
		return nil, err
	}
	exts = sparse.Align(exts, size)
	name := filepath.Base(path)
	lf := &localFile{path: path, st: st, File: File{Name: name, Class: classOf(name), Extents: exts, Extra: map[string]string{},
		Digests: FileDigests{Size: size, SHA256: od.SHA256String(), BLAKE3: od.Digest}}}
	if lf.Form, err = chooseForm(f, size, exts, o.compress != CompressNever); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if o.annotator != nil {
		extra, err := o.annotator.FileAnnotations(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("%s: annotations: %w", path, err)
		}
		for k, v := range extra {
			if !strings.HasPrefix(k, "dev.orkpipe.") || layoutKeys[k] {
				return nil, fmt.Errorf("%s: annotator returned key %q: want a dev.orkpipe.* key that is not a layout key", path, k)
			}
			lf.Extra[k] = v
		}
	}
	lf.Ranges = []Range{{Off: 0, Len: size}}
	if size > o.rangeSize {
		lf.RangeSize = o.rangeSize
		lf.Ranges = rangesOf(size, o.rangeSize)
		per := int(o.rangeSize / artifacts.PieceSize)
		for k := range lf.Ranges {
			lf.Ranges[k].CV = artifacts.MergeCVs(od.Pieces[k*per : min((k+1)*per, len(od.Pieces))])
		}
	}
	if lf.Form == FormRaw {
		for k := range lf.Ranges {
			lf.Ranges[k].Stored = Extent{Off: lf.Ranges[k].Off, Len: lf.Ranges[k].Len}
		}
		h, _ := v1.NewHash(lf.Digests.SHA256)
		lf.Layer, lf.DiffID = v1.Descriptor{Size: size, Digest: h}, lf.Digests.SHA256
	} else if err := lf.hashArchive(ctx, f, slots); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := sameFile(path, st); err != nil {
		return nil, err
	}
	lf.Layer.MediaType = types.MediaType(lf.MediaType())
	if lf.Layer.Annotations, err = layerAnnotations(lf.File); err != nil {
		return nil, err
	}
	return lf, nil
}

// chooseForm decides how a file of size bytes with data exts travels (see sparseMinHoles and
// compressWhenBelow); without compress it is never tar+zstd, and its data is not sampled.
func chooseForm(f io.ReaderAt, size int64, exts []Extent, compress bool) (Form, error) {
	data := sparse.Len(exts)
	holes := size - data
	if compress {
		ratio, err := sampleRatio(f, exts)
		if err != nil {
			return "", fmt.Errorf("sample for compression: %w", err)
		}
		if ratio < compressWhenBelow && (1-ratio)*float64(data) >= compressMinSaving {
			return FormTarZstd, nil
		}
	}
	if holes >= sparseMinHoles && holes*sparseMinShare >= size {
		return FormTar, nil
	}
	return FormRaw, nil
}

// sampleRatio compresses up to sampleWindows windows spread over the data and returns the ratio
// of compressed to raw bytes (1 for a file without data).
func sampleRatio(f io.ReaderAt, exts []Extent) (float64, error) {
	total := sparse.Len(exts)
	if total == 0 {
		return 1, nil
	}
	var raw, packed int64
	var buf bytes.Buffer
	step := max(total/sampleWindows, 1)
	for at := int64(0); at < total; at += step {
		n := min(int64(sampleWindowSize), total-at)
		buf.Reset()
		m, err := encodeFrame(&buf, sparse.NewExtentsReader(f, subExtents(exts, at, n)))
		if err != nil {
			return 0, err
		}
		raw += m
		packed += int64(buf.Len())
	}
	return float64(packed) / float64(raw), nil
}

// subExtents returns the extents covering bytes [at, at+n) of the concatenation of exts.
func subExtents(exts []Extent, at, n int64) []Extent {
	var out []Extent
	for _, e := range exts {
		if n == 0 {
			break
		}
		if at >= e.Len {
			at -= e.Len
			continue
		}
		k := min(e.Len-at, n)
		out = append(out, Extent{Off: e.Off + at, Len: k})
		n -= k
		at = 0
	}
	return out
}

// hashArchive computes where each range's part of the archive is stored and the layer's digests:
// the sha256 of the stored bytes (the layer digest) and of the uncompressed archive (the diffId).
// A tar layer is hashed as it streams; a tar+zstd layer's ranges are compressed in parallel (at
// most cap(slots) frames in memory across the push) and hashed in order, while another goroutine
// hashes the uncompressed archive.
func (lf *localFile) hashArchive(ctx context.Context, f io.ReaderAt, slots chan struct{}) error {
	lf.segs = lf.segments()
	stored := sha256.New()
	var off int64
	if lf.Form == FormTar {
		for k, s := range lf.segs {
			n, err := io.Copy(stored, oci.CtxReader{Ctx: ctx, R: s.reader(f)})
			if err != nil {
				return err
			}
			if n != s.len() {
				return fmt.Errorf("range %d: read %d bytes of the archive, want %d: the file shrank", k, n, s.len())
			}
			lf.Ranges[k].Stored = Extent{Off: off, Len: n}
			off += n
		}
		lf.Layer = v1.Descriptor{Size: off, Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(stored.Sum(nil))}}
		lf.DiffID = lf.Layer.Digest.String()
		return nil
	}
	diff := make(chan error, 1)
	archive := sha256.New()
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		var err error
		for _, s := range lf.segs {
			if _, err = io.Copy(archive, oci.CtxReader{Ctx: dctx, R: s.reader(f)}); err != nil {
				break
			}
		}
		diff <- err
	}()
	err := compressSegments(ctx, f, lf.segs, slots, func(k int, frame []byte) error {
		stored.Write(frame)
		lf.Ranges[k].Stored = Extent{Off: off, Len: int64(len(frame))}
		off += int64(len(frame))
		return nil
	})
	if err != nil {
		cancel()
		<-diff
		return err
	}
	if err := <-diff; err != nil {
		return err
	}
	lf.Layer = v1.Descriptor{Size: off, Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(stored.Sum(nil))}}
	lf.DiffID = "sha256:" + hex.EncodeToString(archive.Sum(nil))
	return nil
}

// compressSegments compresses each non-empty segment into one zstd frame, several at once (each
// holding one of slots until emitted), and calls emit for every segment in order (an empty
// segment has an empty frame).
func compressSegments(ctx context.Context, f io.ReaderAt, segs []segment, slots chan struct{}, emit func(k int, frame []byte) error) error {
	type job struct {
		frame []byte
		err   error
		done  chan struct{}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	order := make(chan *job, cap(slots))
	go func() {
		defer close(order)
		for _, s := range segs {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			j := &job{done: make(chan struct{})}
			go func() {
				defer close(j.done)
				if s.len() == 0 {
					return
				}
				var buf bytes.Buffer
				n, err := encodeFrame(&buf, oci.CtxReader{Ctx: ctx, R: s.reader(f)})
				if err == nil && n != s.len() {
					err = fmt.Errorf("read %d bytes of the archive, want %d: the file shrank", n, s.len())
				}
				j.frame, j.err = buf.Bytes(), err
			}()
			select {
			case order <- j:
			case <-ctx.Done():
				<-j.done
				<-slots
				return
			}
		}
	}()
	var err error
	k := 0
	for j := range order {
		<-j.done
		if err == nil {
			if err = j.err; err == nil {
				err = emit(k, j.frame)
			}
			if err != nil {
				cancel()
			}
		}
		j.frame = nil
		<-slots
		k++
	}
	if err == nil && k != len(segs) {
		err = ctx.Err()
	}
	return err
}

// openStored returns the layer's stored bytes from offset off: the file itself (raw), the archive
// (tar), or the archive's ranges compressed again, in parallel (tar+zstd: the encoder is
// deterministic, so the frames are the ones hashed).
func (lf *localFile) openStored(ctx context.Context, off int64, slots chan struct{}) (io.ReadCloser, error) {
	f, err := os.Open(lf.path)
	if err != nil {
		return nil, err
	}
	if lf.Form == FormRaw {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
	first := 0
	for first < len(lf.Ranges) && lf.Ranges[first].Stored.End() <= off && off > 0 {
		first++
	}
	if first == len(lf.Ranges) {
		f.Close()
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	skip := off - lf.Ranges[first].Stored.Off
	if lf.Form == FormTar {
		rs := make([]io.Reader, 0, len(lf.segs)-first)
		for _, s := range lf.segs[first:] {
			rs = append(rs, s.reader(f))
		}
		r := io.MultiReader(rs...)
		if _, err := io.CopyN(io.Discard, r, skip); err != nil {
			f.Close()
			return nil, err
		}
		return struct {
			io.Reader
			io.Closer
		}{r, f}, nil
	}
	pr, pw := io.Pipe()
	go func() {
		err := compressSegments(ctx, f, lf.segs[first:], slots, func(k int, frame []byte) error {
			if k == 0 {
				frame = frame[skip:]
			}
			_, err := pw.Write(frame)
			return err
		})
		f.Close()
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// fileStamp is what identifies one state of a file: its size, device, inode and times (stampOf).
type fileStamp struct {
	size, mtime, ctime int64
	dev, ino           uint64
}

// sameFile fails if the file at path is no longer the one st describes (replaced, resized or
// written to: inode, size, mtime or ctime differ), naming what changed.
func sameFile(path string, st os.FileInfo) error {
	now, err := os.Stat(path)
	if err != nil {
		return err
	}
	if stampOf(now) != stampOf(st) {
		return fmt.Errorf("%s: changed while it was being pushed (size %d -> %d, mtime %v -> %v): nothing was pushed", path, st.Size(), now.Size(), st.ModTime(), now.ModTime())
	}
	return nil
}
