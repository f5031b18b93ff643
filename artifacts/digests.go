package artifacts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ObjectDigests are the digests of an object's bytes besides its name: the sha256 OCI registries
// name blobs by, and the chaining values of its 4 MiB pieces (the BLAKE3 tree just below the
// root), from which the value of any aligned span of pieces follows (MergeCVs) without reading a
// byte. The store remembers them beside the object the first time they are asked for (Digests),
// so that pushing an object to a registry, or to the remote cache, hashes it at most once.
type ObjectDigests struct {
	Object
	SHA256 [sha256.Size]byte
	// Pieces holds one chaining value per 4 MiB piece, in order, when Size > PieceSize; an object
	// of one piece or less has none (its BLAKE3 is a plain hash of its bytes).
	Pieces []ChainValue
}

// SHA256String returns "sha256:<hex>", the OCI form of the sha256.
func (o ObjectDigests) SHA256String() string { return "sha256:" + hex.EncodeToString(o.SHA256[:]) }

// check validates what can be checked without the bytes: the number of pieces for the size, and
// that the pieces merge into the BLAKE3 digest (so they can only be the object's).
func (o ObjectDigests) check() error {
	want := 0
	if o.Size > PieceSize {
		want = int((o.Size + PieceSize - 1) / PieceSize)
	}
	if len(o.Pieces) != want {
		return fmt.Errorf("%d piece values for %d bytes, want %d", len(o.Pieces), o.Size, want)
	}
	if want > 0 {
		root, err := RootDigest(o.Pieces)
		if err != nil {
			return err
		}
		if root != o.Digest {
			return fmt.Errorf("piece values merge into %s, not %s", root, o.Digest)
		}
	}
	return nil
}

// HashDigests computes the ObjectDigests of the file at path in one read: each 4 MiB piece is read
// once, fed to sha256 in order on one goroutine and hashed as a BLAKE3 subtree on the other CPUs.
// A piece inside a hole is not read (zeros from memory for both hashes). Nothing is remembered: see
// Store.FileDigests and Store.Digests. A file changing while it is read is an error.
func HashDigests(ctx context.Context, path string) (ObjectDigests, error) {
	f, err := os.Open(path)
	if err != nil {
		return ObjectDigests{}, fmt.Errorf("hash: %w", err)
	}
	defer f.Close()
	return hashDigestsOpen(ctx, f)
}

func hashDigestsOpen(ctx context.Context, f *os.File) (ObjectDigests, error) {
	st, err := fstat(f)
	if err != nil {
		return ObjectDigests{}, err
	}
	if st.Mode&0o170000 != 0o100000 {
		return ObjectDigests{}, fmt.Errorf("hash %s: not a regular file", f.Name())
	}
	od, err := hashDigests(ctx, f, st.Size)
	if err != nil {
		return ObjectDigests{}, fmt.Errorf("hash %s: %w", f.Name(), err)
	}
	if err := unchanged(f, st); err != nil {
		return ObjectDigests{}, fmt.Errorf("hash %s: %w", f.Name(), err)
	}
	return od, nil
}

// hashDigests hashes the size logical bytes of f by sha256 and BLAKE3 pieces (see HashDigests).
func hashDigests(ctx context.Context, f *os.File, size int64) (ObjectDigests, error) {
	od := ObjectDigests{Object: Object{Size: size}}
	sh := sha256.New()
	if size <= PieceSize {
		b := make([]byte, size)
		if n, err := f.ReadAt(b, 0); int64(n) != size {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return od, fmt.Errorf("reading %d bytes: %w", size, err)
		}
		sh.Write(b)
		copy(od.SHA256[:], sh.Sum(nil))
		od.Digest = SumBytes(b)
		return od, nil
	}
	n := (size + PieceSize - 1) / PieceSize
	od.Pieces = make([]ChainValue, n)
	// This goroutine reads the pieces in order and feeds sha256 (the serial part); each piece is
	// also handed to a BLAKE3 worker (at most GOMAXPROCS at once across every hash in the process:
	// pieceSlots). A piece's buffer goes back to the pool when the later of the two is done.
	type piece struct {
		buf  *pieceBuf // nil for a hole (zeros)
		refs atomic.Int32
	}
	release := func(p *piece) {
		if p.buf != nil && p.refs.Add(-1) == 0 {
			putPiece(p.buf)
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range n {
		if err := ctx.Err(); err != nil {
			return od, err
		}
		off := i * PieceSize
		want := min(PieceSize, size-off)
		p := &piece{}
		p.refs.Store(2)
		data := zeros()[:want]
		if hole, herr := pieceIsHole(f, off, want); herr != nil || !hole {
			p.buf = getPiece()
			got, err := f.ReadAt(p.buf.b[:want], off)
			if int64(got) < want {
				putPiece(p.buf)
				if err == nil || errors.Is(err, io.EOF) {
					err = fmt.Errorf("file ended at %d, expected %d bytes (changed while reading?)", off+int64(got), size)
				}
				return od, fmt.Errorf("reading at %d: %w", off, err)
			}
			data = p.buf.b[:want]
		}
		select {
		case pieceSlots <- struct{}{}:
		case <-ctx.Done():
			if p.buf != nil {
				putPiece(p.buf)
			}
			return od, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p.buf == nil {
				od.Pieces[i] = zeroPieceCV(off, want)
			} else {
				od.Pieces[i] = SubtreeCV(data, uint64(off/ChunkSize))
			}
			<-pieceSlots
			release(p)
		}()
		sh.Write(data)
		release(p)
	}
	wg.Wait()
	copy(od.SHA256[:], sh.Sum(nil))
	root, err := RootDigest(od.Pieces)
	if err != nil {
		return od, err
	}
	od.Digest = root
	return od, nil
}

// The digests record of an object, digests/<h0h1>/<64 hex> (see the package doc):
//
//	orkpipe-digests 1
//	{"digest":"blake3:<hex>","size":N,"sha256":"sha256:<hex>","pieces":"<64 hex per piece>"}
//	blake3:<hex of the BLAKE3 of the JSON line>
//
// It is written only by Digests, from bytes whose BLAKE3 was checked against the object's name in
// the same read, atomically (temp file, fsync, rename). A read checks the header, the checksum
// line, the JSON (strictly), the name, the object's size and that the pieces merge into the name;
// anything else is a stale or damaged record: it is removed and the digests computed again.
const digestsHeader = "orkpipe-digests 1"

type digestsJSON struct {
	Digest Digest `json:"digest"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Pieces string `json:"pieces"`
}

func (s *Store) digestsPath(d Digest) string { return s.fanPath("digests", d.Hex(), "") }

func encodeDigests(o ObjectDigests) ([]byte, error) {
	pieces := make([]byte, 0, len(o.Pieces)*32)
	for _, cv := range o.Pieces {
		for _, w := range cv {
			pieces = append(pieces, byte(w), byte(w>>8), byte(w>>16), byte(w>>24))
		}
	}
	line, err := json.Marshal(digestsJSON{Digest: o.Digest, Size: o.Size, SHA256: o.SHA256String(), Pieces: hex.EncodeToString(pieces)})
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(digestsHeader + "\n")
	b.Write(line)
	b.WriteString("\n" + SumBytes(line).String() + "\n")
	return b.Bytes(), nil
}

func decodeDigests(b []byte) (ObjectDigests, error) {
	var o ObjectDigests
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) != 4 || string(lines[0]) != digestsHeader || len(lines[3]) != 0 {
		return o, errors.New("not a digests record")
	}
	if SumBytes(lines[1]).String() != string(lines[2]) {
		return o, errors.New("checksum mismatch")
	}
	var j digestsJSON
	dec := json.NewDecoder(bytes.NewReader(lines[1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return o, err
	}
	sh, err := hex.DecodeString(j.SHA256[min(len(j.SHA256), len("sha256:")):])
	if len(j.SHA256) < len("sha256:") || j.SHA256[:len("sha256:")] != "sha256:" || err != nil || len(sh) != sha256.Size {
		return o, fmt.Errorf("sha256 %q", j.SHA256)
	}
	pieces, err := hex.DecodeString(j.Pieces)
	if err != nil || len(pieces)%32 != 0 {
		return o, errors.New("pieces are not whole chaining values")
	}
	o.Digest, o.Size = j.Digest, j.Size
	copy(o.SHA256[:], sh)
	for p := pieces; len(p) > 0; p = p[32:] {
		var cv ChainValue
		for w := range cv {
			cv[w] = uint32(p[4*w]) | uint32(p[4*w+1])<<8 | uint32(p[4*w+2])<<16 | uint32(p[4*w+3])<<24
		}
		o.Pieces = append(o.Pieces, cv)
	}
	if back, err := encodeDigests(o); err != nil || !bytes.Equal(back, b) {
		return ObjectDigests{}, errors.New("record not in its canonical form")
	}
	return o, nil
}

// readDigests returns the remembered digests of d, an object of size bytes, if the record is
// valid; a damaged or inconsistent record is removed (and logged).
func (s *Store) readDigests(d Digest, size int64) (ObjectDigests, bool) {
	p := s.digestsPath(d)
	b, err := readLimited(p, 64<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return ObjectDigests{}, false
	}
	var od ObjectDigests
	if err == nil {
		od, err = decodeDigests(b)
	}
	if err == nil && (od.Digest != d || od.Size != size) {
		err = fmt.Errorf("record is for %s, %d bytes; the object is %s, %d bytes", od.Digest, od.Size, d, size)
	}
	if err == nil {
		err = od.check()
	}
	if err != nil {
		if s.readOnly {
			s.log.Warn("digests record invalid; hashing again (the cache is opened read-only: the record stays)", "digest", d.String(), "record", p, "err", err)
			return ObjectDigests{}, false
		}
		s.log.Warn("digests record invalid; removed, hashing again", "digest", d.String(), "record", p, "err", err)
		os.Remove(p)
		return ObjectDigests{}, false
	}
	return od, true
}

// Digests returns the sha256 and BLAKE3 piece values of the stored object d. They are remembered
// beside the object (digests/) the first time, computed in one read of the object that also checks
// its BLAKE3 against its name: an object that does not match is quarantined (ErrCorrupt) and
// nothing is remembered. Later calls read the record (see readDigests) and hash nothing. An
// absent object is ErrNotFound.
func (s *Store) Digests(ctx context.Context, d Digest) (ObjectDigests, error) {
	if d.IsZero() {
		return ObjectDigests{}, fmt.Errorf("digests: %w: zero digest", ErrInvalidDigest)
	}
	f, err := os.Open(s.objectPath(d))
	if errors.Is(err, fs.ErrNotExist) {
		return ObjectDigests{}, fmt.Errorf("object %s: %w", d, ErrNotFound)
	}
	if err != nil {
		return ObjectDigests{}, fmt.Errorf("object %s: %w", d, err)
	}
	defer f.Close()
	st, err := fstat(f)
	if err != nil {
		return ObjectDigests{}, err
	}
	s.touch(d)
	if od, ok := s.readDigests(d, st.Size); ok {
		return od, nil
	}
	s.digestHashes.add()
	od, err := hashDigestsOpen(ctx, f)
	if err != nil {
		return ObjectDigests{}, fmt.Errorf("object %s: %w", d, err)
	}
	if od.Digest != d {
		return ObjectDigests{}, s.corrupt(d, f, st.Ino, fmt.Sprintf("%d bytes hash to %s", st.Size, od.Digest))
	}
	s.rememberDigests(od)
	return od, nil
}

// isObjectFile reports whether st is the stored object d itself (a hard link to it: same device
// and inode). Its identity is not compared: linking the object elsewhere changes its ctime.
func (s *Store) isObjectFile(d Digest, st *unix.Stat_t) bool {
	var ost unix.Stat_t
	return unix.Lstat(s.objectPath(d), &ost) == nil && ost.Dev == st.Dev && ost.Ino == st.Ino
}

// ForgetDigests removes the digests record of d, so that the next Digests hashes the object
// again: for a caller that found a remembered digest refused (a registry computed another sha256
// for the object's bytes).
func (s *Store) ForgetDigests(d Digest) {
	if s.readOnly {
		return
	}
	if err := os.Remove(s.digestsPath(d)); err == nil {
		s.log.Warn("digests record dropped", "digest", d.String())
	}
}

// rememberDigests writes the digests record of od.Digest; failing only costs a later re-hash.
func (s *Store) rememberDigests(od ObjectDigests) {
	if s.readOnly {
		return
	}
	b, err := encodeDigests(od)
	if err == nil {
		err = s.writeRecord(s.digestsPath(od.Digest), b)
	}
	if err != nil {
		s.log.Warn("digests record not written", "digest", od.Digest.String(), "err", err)
	}
}

// FileDigests returns the digests of the file at path (a build output to push, typically
// materialized from this store). When path's content is known — Materialize wrote it, or the stat
// cache hashed it (see HashFile), and its device, inode, size, mtime and ctime are unchanged since —
// and the store holds that object, they are the object's digests (Digests: remembered, or computed
// once from the object). Otherwise path is hashed in one read (HashDigests), its stat-cache entry
// written, and, if the store holds an object with those bytes, the digests remembered beside it.
func (s *Store) FileDigests(ctx context.Context, path string) (ObjectDigests, error) {
	abs, f, st, err := openUserFile(path)
	if err != nil {
		return ObjectDigests{}, err
	}
	defer f.Close()
	id := idOf(&st)
	entryPath := s.keyPath("stat", abs)
	var known Digest
	if e, ok := s.readJournal(s.keyPath("journal", abs), abs); ok && (e.ID == id || s.isObjectFile(e.Digest, &st)) {
		known = e.Digest
	} else if e, ok := s.readStatEntry(entryPath, abs); ok && e.ID == id {
		known = e.Digest
	}
	if !known.IsZero() {
		od, err := s.Digests(ctx, known)
		if err == nil && od.Size == id.Size {
			return od, nil
		}
		if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrCorrupt) {
			return ObjectDigests{}, err
		}
	}
	s.hashes.add()
	od, err := hashDigestsOpen(ctx, f)
	if err != nil {
		return ObjectDigests{}, err
	}
	s.rememberStat(entryPath, abs, id, od.Digest)
	if _, err := os.Lstat(s.objectPath(od.Digest)); err == nil {
		if _, ok := s.readDigests(od.Digest, od.Size); !ok {
			s.rememberDigests(od) // path's bytes hash to the object's name: they are its bytes
		}
	}
	return od, nil
}
