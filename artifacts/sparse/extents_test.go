package sparse

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"orkpipe/internal/testfiles"
)

func TestDataExtents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparse")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Truncate(16 << 20)
	f.WriteAt(make([]byte, 4096), 0)
	one := []byte{1}
	f.WriteAt(one, 8<<20)
	exts, err := DataExtents(f, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(exts) != 2 || exts[0].Off != 0 || exts[1].Off > 8<<20 || exts[1].End() <= 8<<20 || Len(exts) > 1<<20 {
		t.Fatalf("extents of a file with data at 0 and 8 MiB: %v", exts)
	}
}

// TestContentExtents: the same bytes give the same extents whatever the holes on disk (zeros
// written, or left as holes, or punched in 64 KiB spans as the store's ingest leaves them), and
// the extents are the 4 KiB blocks holding a non-zero byte.
func TestContentExtents(t *testing.T) {
	const size = 5<<20 + 100
	type write struct {
		off int64
		b   []byte
	}
	data := []write{{100, []byte("header")}, {64 << 10, []byte{1}}, {80<<10 - 1, []byte{2, 3}}, {3 << 20, make([]byte, 8192)}, {size - 1, []byte{9}}}
	for i := range data[3].b {
		data[3].b[i] = byte(i | 1)
	}
	want := []Extent{{0, 4096}, {64 << 10, 4096}, {76 << 10, 8192}, {3 << 20, 8192}, {size / Block * Block, size % Block}}
	for _, layout := range []string{"zeros written", "holes", "64 KiB spans punched"} {
		t.Run(layout, func(t *testing.T) {
			f, err := os.Create(filepath.Join(t.TempDir(), "f"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if layout == "holes" {
				f.Truncate(size)
			} else if _, err := f.Write(make([]byte, size)); err != nil {
				t.Fatal(err)
			}
			for _, w := range data {
				f.WriteAt(w.b, w.off)
			}
			if layout == "64 KiB spans punched" {
				for off := int64(128 << 10); off < 3<<20; off += 64 << 10 {
					if err := punchHole(f, off, 64<<10); err != nil {
						testfiles.Need(t, "no hole punching here: %v", err)
					}
				}
			}
			got, err := ContentExtents(context.Background(), f, size)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("ContentExtents = %v, want %v", got, want)
			}
			if fmt.Sprint(Align(got, size)) != fmt.Sprint(got) {
				t.Errorf("content extents are not aligned for the tar form: %v", got)
			}
		})
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "short"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write([]byte("abc"))
	if _, err := ContentExtents(context.Background(), f, 10000); err == nil {
		t.Error("a file shorter than its size: no error")
	}
}

func TestAlign(t *testing.T) {
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
		if got := Align(c.in, c.size); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("Align(%v, %d) = %v, want %v", c.in, c.size, got, c.want)
		}
	}
}
