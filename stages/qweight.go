package stages

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"unsafe"

	"orkpipe/artifacts"
	"orkpipe/ork/pack"
	"orkpipe/ork/quant"
)

// Finalized-weight file ("weight" output of finalize, one per weight), little-endian:
//
//	offset  size      field
//	0       8         magic "ORKQW\x00\x00\x02"
//	8       8         u64 meta_len
//	16      meta_len  meta: JSON of QWeightMeta
//	...     C         the codes of [N][KP], row-major    (Bits 4 or 8): Bits 8, one int8 a code (C = N·KP);
//	                  Bits 4, two a byte over the whole array, code 2i in byte i's low nibble and 2i+1 in
//	                  its high nibble, two's complement (-8..7), a last high nibble 0 when N·KP is odd
//	                  (C = ⌈N·KP/2⌉)
//	...     N·G·4     float32 scales, row-major [N][G]     (Bits 4 or 8; G = QWeightMeta.Groups())
//	...     N·K·2     binary16 values, row-major [N][K]    (Bits 16, dtype F16, instead of codes and scales)
//	end-32  32        BLAKE3-256 of every byte before it
//
// Format 2 (finalize version 6, act-clip version 2) packs int4 codes two a byte; format 1 stored a
// byte a code (a 27B model's finalized weights were 25.5 GiB of the cache, now 14.2). ReadQWeight
// checks the magic, the meta, the exact length, the padding nibble and the digest, so a truncated or
// altered file never reaches tile, propagate or write-orkpack.

var qweightMagic = [8]byte{'O', 'R', 'K', 'Q', 'W', 0, 0, 2}

// ErrWeightFile is wrapped by every error about a malformed finalized-weight or tiled-entry file.
var ErrWeightFile = errors.New("invalid weight file")

// QWeightMeta describes a finalized weight.
type QWeightMeta struct {
	Name     string         `json:"name"`
	DType    string         `json:"dtype"`  // pack dtype name (I4_NATIVE, I4, I4_ROT_A8, I8, I8_ROT, F16)
	Method   string         `json:"method"` // gptq | rtn | none (F16)
	N        int            `json:"n"`
	K        int            `json:"k"`  // logical input features
	KP       int            `json:"kp"` // stored row length (rotation padding)
	Bits     int            `json:"bits"`
	Group    int            `json:"group"`
	Rotation quant.Rotation `json:"rotation"`
	ActBits  int            `json:"act_bits"`
	// ActClip is the activation clip ratio the pack entry records (docs/orkpack.md 2.4): 0 (omitted) for 1,
	// no clipping; set by finalize (a fixed act_clip) or by act-clip (the searched one).
	ActClip float32 `json:"act_clip,omitempty"`
	QErr    float64 `json:"qerr"`
	Source  string  `json:"source"` // BLAKE3 of the source tensor's bytes
}

// Groups returns the scales per row.
func (m QWeightMeta) Groups() int {
	if m.Bits == 16 {
		return 0
	}
	if m.Group == 0 {
		return 1
	}
	return (m.KP + m.Group - 1) / m.Group
}

// QWeight is a finalized weight in memory (one at a time).
type QWeight struct {
	Meta   QWeightMeta
	Codes  []int8
	Scales []float32
	F16    []uint16
}

func (m QWeightMeta) validate() error {
	if m.Name == "" || m.N < 1 || m.K < 1 || m.KP < m.K {
		return fmt.Errorf("%w: meta of %q: shape N=%d K=%d KP=%d", ErrWeightFile, m.Name, m.N, m.K, m.KP)
	}
	dt, err := pack.ParseDType(m.DType)
	if err != nil {
		return fmt.Errorf("%w: meta of %q: %v", ErrWeightFile, m.Name, err)
	}
	if m.Bits != dt.Bits() {
		return fmt.Errorf("%w: meta of %q: bits %d, want %d for dtype %s", ErrWeightFile, m.Name, m.Bits, dt.Bits(), dt)
	}
	if m.Bits == 16 && m.KP != m.K {
		return fmt.Errorf("%w: meta of %q: F16 with KP %d != K %d", ErrWeightFile, m.Name, m.KP, m.K)
	}
	if _, err := artifacts.ParseDigest(m.Source); err != nil {
		return fmt.Errorf("%w: meta of %q: source: %v", ErrWeightFile, m.Name, err)
	}
	if !(m.ActClip >= 0 && m.ActClip <= 1) || m.Bits == 16 && m.ActClip != 0 {
		return fmt.Errorf("%w: meta of %q: activation clip %v (want 0 < clip <= 1, or 0 for none; none for F16)", ErrWeightFile, m.Name, m.ActClip)
	}
	if math.IsNaN(m.QErr) || m.QErr < 0 {
		return fmt.Errorf("%w: meta of %q: qerr %v", ErrWeightFile, m.Name, m.QErr)
	}
	return nil
}

func (m QWeightMeta) payloadBytes() int64 {
	if m.Bits == 16 {
		return int64(m.N) * int64(m.K) * 2
	}
	return m.codesBytes() + int64(m.N)*int64(m.Groups())*4
}

// codesBytes is the size of the file's codes: a byte a code, or two a byte for Bits 4.
func (m QWeightMeta) codesBytes() int64 {
	n := int64(m.N) * int64(m.KP)
	if m.Bits == 4 {
		return (n + 1) / 2
	}
	return n
}

// WriteQWeight writes q to path (which must not exist) in the finalized-weight format.
func WriteQWeight(path string, q *QWeight) error {
	if err := q.Meta.validate(); err != nil {
		return err
	}
	meta, err := json.Marshal(q.Meta)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	h := artifacts.NewStreamHasher()
	bw := bufio.NewWriterSize(io.MultiWriter(f, h), writeBufSize(int64(16+len(meta))+q.Meta.payloadBytes()))
	var hdr [16]byte
	copy(hdr[:8], qweightMagic[:])
	binary.LittleEndian.PutUint64(hdr[8:], uint64(len(meta)))
	bw.Write(hdr[:])
	bw.Write(meta)
	if q.Meta.Bits == 16 {
		if len(q.F16) != q.Meta.N*q.Meta.K {
			f.Close()
			return fmt.Errorf("%w: %s: %d F16 values for %dx%d", ErrWeightFile, q.Meta.Name, len(q.F16), q.Meta.N, q.Meta.K)
		}
		err = binary.Write(bw, binary.LittleEndian, q.F16)
	} else {
		if len(q.Codes) != q.Meta.N*q.Meta.KP || len(q.Scales) != q.Meta.N*q.Meta.Groups() {
			f.Close()
			return fmt.Errorf("%w: %s: %d codes and %d scales for N=%d KP=%d groups=%d", ErrWeightFile, q.Meta.Name, len(q.Codes), len(q.Scales), q.Meta.N, q.Meta.KP, q.Meta.Groups())
		}
		if q.Meta.Bits == 4 {
			err = writeNibbles(bw, q.Codes, q.Meta.Name)
		} else {
			_, err = bw.Write(int8Bytes(q.Codes))
		}
		if err == nil {
			err = writeFloat32s(bw, q.Scales)
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		_, err = f.Write(artifacts.DigestOf(h).Bytes())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing weight file %s: %w", path, err)
	}
	return nil
}

// int8Bytes views codes as bytes (two's complement: the file's int8 encoding).
func int8Bytes(codes []int8) []byte {
	if len(codes) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&codes[0])), len(codes))
}

// writeFloat32s writes v little-endian through a small buffer (binary.Write would encode all of v
// into one new buffer first).
func writeFloat32s(w io.Writer, v []float32) error {
	var buf [4096]byte
	for len(v) > 0 {
		n := min(len(v), len(buf)/4)
		for i, x := range v[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
		}
		if _, err := w.Write(buf[:4*n]); err != nil {
			return err
		}
		v = v[n:]
	}
	return nil
}

func decodeQWeightHeader(r io.ReaderAt, size int64, path string) (QWeightMeta, int64, error) {
	var hdr [16]byte
	if _, err := r.ReadAt(hdr[:], 0); err != nil || !bytes.Equal(hdr[:8], qweightMagic[:]) {
		return QWeightMeta{}, 0, fmt.Errorf("%w: %s: bad magic or short header", ErrWeightFile, path)
	}
	ml := binary.LittleEndian.Uint64(hdr[8:])
	if ml == 0 || ml > 1<<20 || int64(ml)+16+32 > size {
		return QWeightMeta{}, 0, fmt.Errorf("%w: %s: meta length %d in a file of %d bytes", ErrWeightFile, path, ml, size)
	}
	meta := make([]byte, ml)
	if _, err := r.ReadAt(meta, 16); err != nil {
		return QWeightMeta{}, 0, fmt.Errorf("%w: %s: reading meta: %v", ErrWeightFile, path, err)
	}
	var m QWeightMeta
	dec := json.NewDecoder(bytes.NewReader(meta))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, 0, fmt.Errorf("%w: %s: meta: %v", ErrWeightFile, path, err)
	}
	if err := m.validate(); err != nil {
		return m, 0, fmt.Errorf("%s: %w", path, err)
	}
	off := 16 + int64(ml)
	if want := off + m.payloadBytes() + 32; want != size {
		return m, 0, fmt.Errorf("%w: %s: %d bytes, want %d for %s N=%d KP=%d", ErrWeightFile, path, size, want, m.DType, m.N, m.KP)
	}
	return m, off, nil
}

// ReadQWeightMeta reads the meta of a finalized-weight file (checked as ReadQWeight checks it, with the
// file's size; the payload is neither read nor verified).
func ReadQWeightMeta(path string) (QWeightMeta, error) {
	f, err := os.Open(path)
	if err != nil {
		return QWeightMeta{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return QWeightMeta{}, err
	}
	m, _, err := decodeQWeightHeader(f, st.Size(), path)
	return m, err
}

// ReadQWeight reads and verifies a whole finalized-weight file. It holds the codes (a byte each,
// int4 codes unpacked as they are read) and the scales, and of the file's bytes only its meta and
// ~100 KiB of read buffers.
func ReadQWeight(path string) (*QWeight, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	m, off, err := decodeQWeightHeader(f, size, path)
	if err != nil {
		return nil, err
	}
	h := artifacts.NewStreamHasher()
	r := io.TeeReader(bufio.NewReaderSize(io.NewSectionReader(f, 0, size-32), 64<<10), h)
	if _, err := io.CopyN(io.Discard, r, off); err != nil {
		return nil, fmt.Errorf("%w: %s: header: %v", ErrWeightFile, path, err)
	}
	q := &QWeight{Meta: m}
	padded := true
	if m.Bits == 16 {
		q.F16 = make([]uint16, m.N*m.K)
		err = binary.Read(r, binary.LittleEndian, q.F16)
	} else {
		q.Codes = make([]int8, m.N*m.KP)
		if m.Bits == 4 {
			padded, err = readNibbles(r, q.Codes)
		} else {
			_, err = io.ReadFull(r, int8Bytes(q.Codes))
		}
		if err == nil {
			q.Scales = make([]float32, m.N*m.Groups())
			err = readFloat32s(r, q.Scales)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: payload: %v", ErrWeightFile, path, err)
	}
	var sum [32]byte
	if _, err := f.ReadAt(sum[:], size-32); err != nil {
		return nil, fmt.Errorf("%w: %s: digest: %v", ErrWeightFile, path, err)
	}
	if got := artifacts.DigestOf(h); !bytes.Equal(got.Bytes(), sum[:]) {
		return nil, fmt.Errorf("%w: %s: BLAKE3 mismatch (corrupt)", ErrWeightFile, path)
	}
	if !padded {
		return nil, fmt.Errorf("%w: %s: the padding nibble after the last of %d int4 codes is not 0", ErrWeightFile, path, len(q.Codes))
	}
	return q, nil
}

// readFloat32s reads len(v) little-endian float32s into v through a small buffer.
func readFloat32s(r io.Reader, v []float32) error {
	var buf [4096]byte
	for len(v) > 0 {
		n := min(len(v), len(buf)/4)
		if _, err := io.ReadFull(r, buf[:4*n]); err != nil {
			return err
		}
		for i := range v[:n] {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
		}
		v = v[n:]
	}
	return nil
}

// PackMeta returns the pack entry metadata of the weight.
func (m QWeightMeta) PackMeta() (pack.Meta, error) {
	dt, err := pack.ParseDType(m.DType)
	if err != nil {
		return pack.Meta{}, err
	}
	src, err := artifacts.ParseDigest(m.Source)
	if err != nil {
		return pack.Meta{}, err
	}
	pm := pack.Meta{Name: m.Name, DType: dt, K: m.KP, N: m.N, Group: m.Group, ActBits: m.ActBits, ActClip: m.ActClip, QErr: m.QErr}
	copy(pm.Source[:], src.Bytes())
	if !m.Rotation.IsZero() {
		pm.Rotation = pack.Rotation{Kind: pack.RotHadamardUnsigned, Block: m.Rotation.Block}
		if m.Rotation.Signs {
			pm.Rotation = pack.Rotation{Kind: pack.RotHadamard, Block: m.Rotation.Block, Seed: m.Rotation.Seed}
		}
	}
	return pm, nil
}

// PackWeight returns the weight as a decoded pack entry (for tiling and emulation).
func (q *QWeight) PackWeight() (pack.Weight, error) {
	pm, err := q.Meta.PackMeta()
	if err != nil {
		return pack.Weight{}, err
	}
	return pack.Weight{Meta: pm, Codes: q.Codes, Scales: q.Scales, F16: q.F16}, nil
}
