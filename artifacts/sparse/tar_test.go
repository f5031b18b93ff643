package sparse

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"orkpipe/internal/testfiles"
)

// tarCase is a file for the tar form: its name, size and data extents.
type tarCase struct {
	name string
	size int64
	exts []Extent
}

func full(size int64) []Extent {
	if size == 0 {
		return nil
	}
	return []Extent{{0, size}}
}

func tarCases() []tarCase {
	long := strings.Repeat("n", 150) + ".gguf"
	return []tarCase{
		{"plain.orkpack", 100_000, full(100_000)},
		{"empty.bin", 0, nil},
		{"stub.gguf", 3 << 20, []Extent{{0, 5120}, {65536, 4096}, {1 << 20, 512}, {3<<20 - 1024, 1024}}},
		{"odd-end.gguf", 3<<20 + 7, []Extent{{0, 512}, {3 << 20, 7}}},
		{"leading-hole.gguf", 1 << 20, []Extent{{512 << 10, 1024}}},
		{"holes-only.gguf", 1 << 20, nil},
		{long, 70_000, []Extent{{1000 / 512 * 512, 2048}}},
		{long, 70_000, full(70_000)},
	}
}

// tarFile returns the file's logical bytes (random non-zero data in its extents, zeros
// elsewhere) and its tar form.
func tarFile(c tarCase, seed uint64) (content, archive []byte) {
	content = make([]byte, c.size)
	rng := rand.New(rand.NewPCG(seed, 9))
	var data bytes.Buffer
	for _, e := range c.exts {
		for i := e.Off; i < e.End(); i++ {
			content[i] = byte(rng.Uint32() | 1)
		}
		data.Write(content[e.Off:e.End()])
	}
	archive = append(TarHeader(c.name, c.size, c.exts), data.Bytes()...)
	archive = append(archive, TarTrailer(int64(data.Len()))...)
	return content, archive
}

// TestTarFormReadsBack reads the tar form with Go's archive/tar, as a ModelPack client extracts a
// tar layer: one regular entry with the file's name, size, mode 0444 and mtime 0, whose content is
// the file's bytes (holes as zeros), and a well-formed end of archive.
func TestTarFormReadsBack(t *testing.T) {
	for i, c := range tarCases() {
		content, archive := tarFile(c, uint64(i))
		if len(archive)%512 != 0 {
			t.Errorf("%s: archive of %d bytes, not whole blocks", c.name, len(archive))
		}
		tr := tar.NewReader(bytes.NewReader(archive))
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if h.Name != c.name || h.Size != c.size || h.Mode != TarMode || h.Typeflag != tar.TypeReg || !h.ModTime.Equal(time.Unix(0, 0)) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: header %q size %d mode %o type %c mtime %v uid %d gid %d", c.name, h.Name, h.Size, h.Mode, h.Typeflag, h.ModTime, h.Uid, h.Gid)
		}
		got, err := io.ReadAll(tr)
		if err != nil || !bytes.Equal(got, content) {
			t.Errorf("%s: content differs (%d bytes, %v)", c.name, len(got), err)
		}
		if _, err := tr.Next(); err != io.EOF {
			t.Errorf("%s: after the entry: %v, want io.EOF", c.name, err)
		}
	}
}

// TestTarFormLargeSizes: an entry of 8 GiB or more does not fit the ustar size field; its pax size
// record must carry it (a 28 GiB stub's data can exceed 8 GiB). Only the header is read.
func TestTarFormLargeSizes(t *testing.T) {
	const big = 9 << 30
	for _, c := range []tarCase{
		{"big.orkpack", big, full(big)},
		{"big.gguf", 30 << 30, []Extent{{0, 4096}, {1 << 30, big}}},
	} {
		h, err := tar.NewReader(bytes.NewReader(TarHeader(c.name, c.size, c.exts))).Next()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if h.Name != c.name || h.Size != c.size {
			t.Errorf("%s: header %q of %d bytes, want %d", c.name, h.Name, h.Size, c.size)
		}
	}
}

// TestTarFormGNUTar extracts the tar form with GNU tar (when installed), which must give the file
// byte for byte and keep the holes of a sparse one.
func TestTarFormGNUTar(t *testing.T) {
	bin, err := exec.LookPath("tar")
	if err != nil {
		testfiles.Need(t, "no tar on PATH")
	}
	if out, _ := exec.Command(bin, "--version").Output(); !bytes.Contains(out, []byte("GNU tar")) {
		testfiles.Need(t, "%s is not GNU tar", bin)
	}
	for i, c := range tarCases()[:6] {
		content, archive := tarFile(c, uint64(i))
		dir := t.TempDir()
		a := filepath.Join(dir, "layer.tar")
		if err := os.WriteFile(a, archive, 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "out")
		os.Mkdir(out, 0o755)
		if b, err := exec.Command(bin, "-xf", a, "-C", out).CombinedOutput(); err != nil {
			t.Fatalf("%s: tar -x: %v: %s", c.name, err, b)
		}
		got, err := os.ReadFile(filepath.Join(out, c.name))
		if err != nil || !bytes.Equal(got, content) {
			t.Errorf("%s: GNU tar extracted %d bytes (%v), not the file", c.name, len(got), err)
		}
		if HasHoles(c.size, c.exts) {
			if n := blocks(t, filepath.Join(out, c.name)) * 512; n > Len(c.exts)+int64(len(c.exts)+1)*8192 {
				t.Errorf("%s: GNU tar allocated %d bytes for %d bytes of data: holes not kept", c.name, n, Len(c.exts))
			}
		}
	}
}

// TestReadTar reads every case back into a file: the same bytes, the holes kept (no more blocks
// allocated than the data needs), the entry as declared; and it reads back what WriteTar writes
// from a file.
func TestReadTar(t *testing.T) {
	ctx := context.Background()
	for i, c := range tarCases() {
		content, archive := tarFile(c, uint64(i))
		dst, err := os.Create(filepath.Join(t.TempDir(), "out"))
		if err != nil {
			t.Fatal(err)
		}
		e, err := ReadTar(ctx, bytes.NewReader(archive), dst)
		dst.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if e.Name != c.name || e.Size != c.size || fmt.Sprint(e.Extents) != fmt.Sprint(c.exts) {
			t.Errorf("%s: entry %q, %d bytes, %v; want %d bytes, %v", c.name, e.Name, e.Size, e.Extents, c.size, c.exts)
		}
		got, err := os.ReadFile(dst.Name())
		if err != nil || !bytes.Equal(got, content) {
			t.Errorf("%s: read back %d bytes (%v), not the file", c.name, len(got), err)
		}
		if n := blocks(t, dst.Name()) * 512; n > Len(c.exts)+int64(len(c.exts))*8192 {
			t.Errorf("%s: %d bytes allocated for %d bytes of data: holes not kept", c.name, n, Len(c.exts))
		}
		// WriteTar from the file read back (a file source: copy_file_range) gives the same archive.
		src, err := os.Open(dst.Name())
		if err != nil {
			t.Fatal(err)
		}
		var w bytes.Buffer
		n, err := WriteTar(ctx, &w, src, c.name, c.size, c.exts)
		src.Close()
		if err != nil || n != int64(len(archive)) || !bytes.Equal(w.Bytes(), archive) {
			t.Errorf("%s: WriteTar wrote %d bytes (%v), want the %d of the tar form", c.name, n, err, len(archive))
		}
	}
}

// TestReadTarRejects: anything but the exact tar form fails with ErrBadTar, nothing before,
// between or after.
func TestReadTarRejects(t *testing.T) {
	c := tarCases()[2] // sparse, 4 extents
	_, good := tarFile(c, 1)
	hdr := len(TarHeader(c.name, c.size, c.exts))
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name    string
		archive []byte
	}{
		{"empty", nil},
		{"truncated header", good[:700]},
		{"truncated data", good[:hdr+100]},
		{"no trailer", good[:len(good)-1024]},
		{"trailing garbage", append(bytes.Clone(good), make([]byte, 512)...)},
		{"non-zero trailer", mutate(func(b []byte) []byte { b[len(b)-1] = 1; return b })},
		{"flipped name byte", mutate(func(b []byte) []byte { b[0] ^= 1; return b })},
		{"mode changed", mutate(func(b []byte) []byte { b[512*3+102] = '7'; return b })},
		{"extent off the 512-byte grid", bytes.Replace(good, []byte("\n65536\n"), []byte("\n65537\n"), 1)},
		{"extents overlapping", bytes.Replace(good, []byte("\n65536\n"), []byte("\n04608\n"), 1)},
		{"map with letters", bytes.Replace(good, []byte("\n65536\n"), []byte("\n6553x\n"), 1)},
		{"plain tar of another shape", func() []byte {
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			tw.WriteHeader(&tar.Header{Name: "x", Mode: 0o444, Size: 3, Typeflag: tar.TypeReg})
			tw.Write([]byte("abc"))
			tw.Close()
			return b.Bytes()
		}()},
	}
	for _, tc := range cases {
		dst, err := os.Create(filepath.Join(t.TempDir(), "out"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = ReadTar(context.Background(), bytes.NewReader(tc.archive), dst)
		dst.Close()
		if !errors.Is(err, ErrBadTar) {
			t.Errorf("%s: %v, want ErrBadTar", tc.name, err)
		}
	}
}

// blocks returns the 512-byte blocks allocated to path.
func blocks(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Blocks
}
