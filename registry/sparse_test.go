package registry

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestSplitExtents(t *testing.T) {
	tests := []struct {
		name string
		in   []Extent
		part int64
		want [][]Extent
	}{
		{"empty", nil, 10, nil},
		{"one part", []Extent{{0, 10}}, 10, [][]Extent{{{0, 10}}}},
		{"cut", []Extent{{0, 25}}, 10, [][]Extent{{{0, 10}}, {{10, 10}}, {{20, 5}}}},
		{"sparse", []Extent{{0, 4}, {100, 8}, {200, 3}}, 10,
			[][]Extent{{{0, 4}, {100, 6}}, {{106, 2}, {200, 3}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := splitExtents(tc.in, tc.part); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("splitExtents(%v, %d) = %v, want %v", tc.in, tc.part, got, tc.want)
			}
		})
	}
}

func TestSubExtents(t *testing.T) {
	exts := []Extent{{0, 4}, {100, 8}, {200, 3}}
	tests := []struct {
		at, n int64
		want  []Extent
	}{
		{0, 4, []Extent{{0, 4}}},
		{2, 4, []Extent{{2, 2}, {100, 2}}},
		{4, 9, []Extent{{100, 8}, {200, 1}}},
		{14, 5, []Extent{{202, 1}}},
	}
	for _, tc := range tests {
		if got := subExtents(exts, tc.at, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("subExtents(%d, %d) = %v, want %v", tc.at, tc.n, got, tc.want)
		}
	}
}

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
	exts, err := dataExtents(f, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(exts) != 2 || exts[0].Off != 0 || exts[1].Off > 8<<20 || exts[1].End() <= 8<<20 || extentsLen(exts) > 1<<20 {
		t.Fatalf("extents of a file with data at 0 and 8 MiB: %v", exts)
	}
	var w extentWriter
	w.f, w.exts = f, []Extent{{100, 2}, {300, 1}}
	if n, err := w.Write([]byte{7, 8, 9}); n != 3 || err != nil {
		t.Fatalf("extentWriter: %d %v", n, err)
	}
	if _, err := w.Write([]byte{1}); err == nil {
		t.Fatal("extentWriter accepted bytes beyond its extents")
	}
	b := make([]byte, 1)
	f.ReadAt(b, 300)
	if b[0] != 9 {
		t.Fatalf("byte at 300 = %d, want 9", b[0])
	}
}
