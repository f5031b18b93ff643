package boardhost

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"orkpipe/internal/testfiles"
)

// buildLDCache writes entries in the new ld.so.cache format (with an old-format table first when
// old is set), as ldconfig lays it out.
func buildLDCache(entries []LDCacheEntry, old bool) []byte {
	var prefix []byte
	if old {
		prefix = append([]byte(ldCacheOldMagic), 0)
		prefix = binary.LittleEndian.AppendUint32(prefix, 1)
		prefix = append(prefix, make([]byte, ldCacheOldEntry)...)
		for len(prefix)%8 != 0 {
			prefix = append(prefix, 0)
		}
	}
	strStart := ldCacheNewHdr + len(entries)*ldCacheNewEntry
	var strs bytes.Buffer
	hdr := []byte(ldCacheNewMagic)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(entries)))
	var table []byte
	for _, e := range entries {
		nameOff := strStart + strs.Len()
		strs.WriteString(e.Name + "\x00")
		pathOff := strStart + strs.Len()
		strs.WriteString(e.Path + "\x00")
		table = binary.LittleEndian.AppendUint32(table, uint32(e.Flags))
		table = binary.LittleEndian.AppendUint32(table, uint32(nameOff))
		table = binary.LittleEndian.AppendUint32(table, uint32(pathOff))
		table = binary.LittleEndian.AppendUint32(table, 0)
		table = binary.LittleEndian.AppendUint64(table, e.HWCap)
	}
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(strs.Len()))
	hdr = append(hdr, make([]byte, ldCacheNewHdr-len(hdr))...)
	out := append(prefix, hdr...)
	out = append(out, table...)
	return append(out, strs.Bytes()...)
}

func TestParseLDCacheBuilt(t *testing.T) {
	entries := []LDCacheEntry{
		{Name: "libc.so.6", Path: "/usr/lib/aarch64-linux-gnu/glibc-hwcaps/x/libc.so.6", Flags: 0x0a03, HWCap: hwcapExtension | 1},
		{Name: "libc.so.6", Path: "/lib/aarch64-linux-gnu/libc.so.6", Flags: 0x0a03},
		{Name: "librknnrt.so", Path: "/usr/lib/librknnrt.so", Flags: 0x0a03},
	}
	for _, old := range []bool{false, true} {
		got, err := ParseLDCache(buildLDCache(entries, old))
		if err != nil || !reflect.DeepEqual(got, entries) {
			t.Errorf("old=%t: %+v, %v", old, got, err)
		}
	}
}

func TestParseLDCacheSystem(t *testing.T) {
	data, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		testfiles.Need(t, "no system ld.so.cache: %v", err)
	}
	entries, err := ParseLDCache(data)
	if err != nil {
		t.Fatal(err)
	}
	var libc bool
	for _, e := range entries {
		if e.Name == "libc.so.6" {
			if _, err := os.Stat(e.Path); err != nil {
				t.Errorf("libc.so.6 -> %s: %v", e.Path, err)
			}
			libc = true
		}
	}
	if !libc || len(entries) < 10 {
		t.Errorf("%d entries, libc.so.6 present %t", len(entries), libc)
	}
}

func TestParseLDCacheRejects(t *testing.T) {
	good := buildLDCache([]LDCacheEntry{{Name: "libc.so.6", Path: "/lib/libc.so.6", Flags: 3}}, false)
	badName := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(badName[ldCacheNewHdr+4:], 1<<30)
	unterminated := good[:len(good)-1]
	tooMany := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(tooMany[20:], 1000)
	oldOnly := append([]byte(ldCacheOldMagic), 0, 0, 0, 0, 0)
	for name, data := range map[string][]byte{
		"empty": nil, "garbage": []byte("not a cache at all, but long enough for a header......"),
		"name offset": badName, "unterminated": unterminated, "too many entries": tooMany,
		"old format only": oldOnly, "truncated header": good[:30],
	} {
		if _, err := ParseLDCache(data); !errors.Is(err, ErrLDCache) {
			t.Errorf("%s: err = %v, want ErrLDCache", name, err)
		}
	}
}

func TestReadLDSoConf(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "ld.so.conf.d"), 0o755)
	os.WriteFile(filepath.Join(dir, "ld.so.conf"), []byte("# comment\ninclude ld.so.conf.d/*.conf\n/opt/ork/lib:/opt/x=libc6\nhwcap 0 nosegneg\ninclude ld.so.conf\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "ld.so.conf.d", "a.conf"), []byte("/usr/local/lib\n relative/ignored\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "ld.so.conf.d", "b.conf"), []byte("/usr/lib/aarch64-linux-gnu # rk\n"), 0o644)
	got := readLDSoConf(filepath.Join(dir, "ld.so.conf"), map[string]bool{})
	want := []string{"/usr/local/lib", "/usr/lib/aarch64-linux-gnu", "/opt/ork/lib", "/opt/x"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestResolveWithoutLDCache: with no cache the ld.so.conf directories are searched and the
// program records that it was resolved that way.
func TestResolveWithoutLDCache(t *testing.T) {
	if _, err := os.Stat("/etc/ld.so.conf"); err != nil {
		testfiles.Need(t, "no /etc/ld.so.conf")
	}
	p, err := ResolveProgram(t.Context(), "/bin/ls", WithLDCache(filepath.Join(t.TempDir(), "absent.cache"), "/etc/ld.so.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if libc, ok := object(p, "libc.so.6"); !ok || libc.Path == "" || len(p.Notes) != 1 {
		t.Errorf("libc %+v, notes %q", libc, p.Notes)
	}
}

// FuzzParseLDCache: never panics; accepted entries have their strings inside the file.
func FuzzParseLDCache(f *testing.F) {
	f.Add(buildLDCache([]LDCacheEntry{{Name: "libc.so.6", Path: "/lib/libc.so.6", Flags: 3}}, false))
	f.Add(buildLDCache([]LDCacheEntry{{Name: "a", Path: "/b"}, {Name: "c", Path: "/d", HWCap: hwcapExtension}}, true))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := ParseLDCache(data)
		if err != nil {
			if !errors.Is(err, ErrLDCache) {
				t.Fatalf("error not wrapping ErrLDCache: %v", err)
			}
			return
		}
		for _, e := range entries {
			if !bytes.Contains(data, []byte(e.Name+"\x00")) || !bytes.Contains(data, []byte(e.Path+"\x00")) {
				t.Fatalf("entry %+v not in the data", e)
			}
		}
	})
}
