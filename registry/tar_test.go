package registry

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tarCase is a file for the tar form: its name, size and data extents.
type tarCase struct {
	name string
	size int64
	exts []Extent
}

func tarCases() []tarCase {
	long := strings.Repeat("n", 150) + ".gguf"
	return []tarCase{
		{"plain.orkpack", 100_000, fullExtents(100_000)},
		{"empty.bin", 0, nil},
		{"stub.gguf", 3 << 20, []Extent{{0, 5120}, {65536, 4096}, {1 << 20, 512}, {3<<20 - 1024, 1024}}},
		{"odd-end.gguf", 3<<20 + 7, []Extent{{0, 512}, {3 << 20, 7}}},
		{"leading-hole.gguf", 1 << 20, []Extent{{512 << 10, 1024}}},
		{"holes-only.gguf", 1 << 20, nil},
		{long, 70_000, []Extent{{1000, 2000}}},
		{long, 70_000, fullExtents(70_000)},
	}
}

// tarFile returns the file's logical bytes (random data in its extents, zeros elsewhere) and its
// tar form.
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
	archive = append(tarHeader(c.name, c.size, c.exts), data.Bytes()...)
	archive = append(archive, tarTrailer(int64(data.Len()))...)
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
		if h.Name != c.name || h.Size != c.size || h.Mode != 0o444 || h.Typeflag != tar.TypeReg || !h.ModTime.Equal(time.Unix(0, 0)) || h.Uid != 0 || h.Gid != 0 {
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
		{"big.orkpack", big, fullExtents(big)},
		{"big.gguf", 30 << 30, []Extent{{0, 4096}, {1 << 30, big}}},
	} {
		h, err := tar.NewReader(bytes.NewReader(tarHeader(c.name, c.size, c.exts))).Next()
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
		t.Skip("no tar on PATH")
	}
	if out, _ := exec.Command(bin, "--version").Output(); !bytes.Contains(out, []byte("GNU tar")) {
		t.Skipf("%s is not GNU tar", bin)
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
		if hasHoles(c.size, c.exts) {
			if n := blocks(t, filepath.Join(out, c.name)) * 512; n > extentsLen(c.exts)+int64(len(c.exts)+1)*8192 {
				t.Errorf("%s: GNU tar allocated %d bytes for %d bytes of data: holes not kept", c.name, n, extentsLen(c.exts))
			}
		}
	}
}

func TestAlignExtents(t *testing.T) {
	for _, c := range []struct {
		in   []Extent
		size int64
		want []Extent
	}{
		{nil, 100, nil},
		{[]Extent{{0, 4096}, {8192, 4096}}, 1 << 20, []Extent{{0, 4096}, {8192, 4096}}},
		{[]Extent{{10, 5}}, 1 << 20, []Extent{{0, 512}}},
		{[]Extent{{0, 100}, {600, 10}}, 1 << 20, []Extent{{0, 1024}}},
		{[]Extent{{1000, 10}, {2000, 10}}, 1 << 20, []Extent{{512, 512}, {1536, 512}}},
		{[]Extent{{1000, 10}, {1030, 10}}, 1 << 20, []Extent{{512, 1024}}},
		{[]Extent{{100, 900}}, 1000, []Extent{{0, 1000}}},
	} {
		if got := alignExtents(c.in, c.size); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("alignExtents(%v, %d) = %v, want %v", c.in, c.size, got, c.want)
		}
	}
}
