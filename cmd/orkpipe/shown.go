package main

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// shown returns s as text output may print it: unchanged when every rune is graphic or a space, else
// quoted as Go quotes strings (control characters, format characters such as the bidi overrides, and
// invalid UTF-8 escaped). Names and strings that come from files and registries (entry and tensor
// names, annotations, signer key ids, a config's descriptor) are printed through it, so that none can
// move the cursor, clear or overwrite a line, start a line of its own ("FAKE LINE: all entries
// verified OK") or reorder what follows it. JSON output escapes them by itself.
func shown(s string) string {
	for i, r := range s {
		if r == utf8.RuneError && !validAt(s, i) || !unicode.IsGraphic(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// validAt reports whether the rune at byte i of s is a real U+FFFD rather than invalid UTF-8.
func validAt(s string, i int) bool {
	_, size := utf8.DecodeRuneInString(s[i:])
	return size == 3
}

// shownAll is shown of each of ss.
func shownAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = shown(s)
	}
	return out
}
