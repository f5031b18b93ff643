package boardhost

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ld.so.cache, as glibc's ldconfig writes it (elf/dl-cache.h), little-endian as on the boards:
//
//	old format (optional): "ld.so-1.7.0" (11 bytes), pad to 12, nlibs uint32,
//	                       nlibs x {flags int32, key uint32, value uint32}
//	new format:            "glibc-ld.so.cache" "1.1" (20 bytes), nlibs uint32, len_strings uint32,
//	                       flags uint8, pad [3]byte, extension_offset uint32, unused [3]uint32,
//	                       nlibs x {flags int32, key uint32, value uint32, osversion uint32, hwcap uint64}
//
// After an old-format table the new header starts at the next 8-byte boundary. Key (soname) and
// value (path) are offsets of NUL-terminated strings from the start of the new header.
const (
	ldCacheOldMagic = "ld.so-1.7.0"
	ldCacheNewMagic = "glibc-ld.so.cache1.1"
	ldCacheNewHdr   = 48
	ldCacheNewEntry = 24
	ldCacheOldEntry = 12
	// hwcapExtension marks an entry that lives in a glibc-hwcaps subdirectory.
	hwcapExtension = uint64(1) << 62
)

// LDCacheEntry is one library in ld.so.cache.
type LDCacheEntry struct {
	Name  string // the soname, e.g. "libc.so.6"
	Path  string // absolute path
	Flags int32
	HWCap uint64
}

// ParseLDCache parses the bytes of an ld.so.cache file. It accepts the new format alone or after
// an old-format table; an old-format-only file is unsupported (glibc stopped writing it in 2.32
// releases and every board image since carries the new format).
func ParseLDCache(data []byte) ([]LDCacheEntry, error) {
	base := 0
	if bytes.HasPrefix(data, []byte(ldCacheOldMagic)) {
		if len(data) < 16 {
			return nil, fmt.Errorf("%w: old-format header truncated (%d bytes)", ErrLDCache, len(data))
		}
		n := uint64(binary.LittleEndian.Uint32(data[12:16]))
		end := 16 + n*ldCacheOldEntry
		if end > uint64(len(data)) {
			return nil, fmt.Errorf("%w: old-format table of %d entries exceeds the file (%d bytes)", ErrLDCache, n, len(data))
		}
		base = int((end + 7) &^ 7)
	}
	if base+ldCacheNewHdr > len(data) || !bytes.Equal(data[base:base+len(ldCacheNewMagic)], []byte(ldCacheNewMagic)) {
		return nil, fmt.Errorf("%w: no %q header at offset %d", ErrLDCache, ldCacheNewMagic, base)
	}
	hdr := data[base:]
	n := uint64(binary.LittleEndian.Uint32(hdr[20:24]))
	if ldCacheNewHdr+n*ldCacheNewEntry > uint64(len(hdr)) {
		return nil, fmt.Errorf("%w: %d entries exceed the file (%d bytes)", ErrLDCache, n, len(data))
	}
	str := func(off uint32, what string, i uint64) (string, error) {
		if uint64(off) >= uint64(len(hdr)) {
			return "", fmt.Errorf("%w: entry %d: %s offset %d outside the file", ErrLDCache, i, what, off)
		}
		s := hdr[off:]
		z := bytes.IndexByte(s, 0)
		if z < 0 {
			return "", fmt.Errorf("%w: entry %d: %s at offset %d is not NUL-terminated", ErrLDCache, i, what, off)
		}
		return string(s[:z]), nil
	}
	entries := make([]LDCacheEntry, 0, n)
	for i := uint64(0); i < n; i++ {
		e := hdr[ldCacheNewHdr+i*ldCacheNewEntry:]
		name, err := str(binary.LittleEndian.Uint32(e[4:8]), "name", i)
		if err != nil {
			return nil, err
		}
		path, err := str(binary.LittleEndian.Uint32(e[8:12]), "path", i)
		if err != nil {
			return nil, err
		}
		entries = append(entries, LDCacheEntry{
			Name:  name,
			Path:  path,
			Flags: int32(binary.LittleEndian.Uint32(e[0:4])),
			HWCap: binary.LittleEndian.Uint64(e[16:24]),
		})
	}
	return entries, nil
}

// readLDSoConf returns the directories listed in an ld.so.conf file, following "include" globs
// (relative to the including file's directory) and ignoring "hwcap" lines and comments. Missing
// files yield no directories; seen guards against include loops.
func readLDSoConf(path string, seen map[string]bool) []string {
	if seen[path] {
		return nil
	}
	seen[path] = true
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, line := range strings.Split(string(data), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "include":
			for _, pattern := range fields[1:] {
				if !filepath.IsAbs(pattern) {
					pattern = filepath.Join(filepath.Dir(path), pattern)
				}
				matches, _ := filepath.Glob(pattern)
				for _, m := range matches {
					dirs = append(dirs, readLDSoConf(m, seen)...)
				}
			}
		case "hwcap":
		default:
			for _, f := range fields {
				for _, d := range strings.FieldsFunc(f, func(r rune) bool { return r == ':' || r == ',' }) {
					if d, _, _ = strings.Cut(d, "="); filepath.IsAbs(d) {
						dirs = append(dirs, filepath.Clean(d))
					}
				}
			}
		}
	}
	return dirs
}
