// Package units parses and formats byte sizes ("6GiB", "512MiB", "1.5G", "1048576").
// Binary (KiB, MiB, GiB, TiB) and decimal (KB, MB, GB, TB) suffixes are both accepted;
// a bare K, M, G or T is binary, as memory sizes usually are.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

var suffixes = []struct {
	s string
	m float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseSize parses a non-negative byte size. The error names the text and what was expected.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, sf := range suffixes {
		if strings.HasSuffix(strings.ToUpper(t), strings.ToUpper(sf.s)) && len(t) > len(sf.s) {
			// Case-sensitive match on the "i" of binary suffixes is not required by users; accept any case.
			t = strings.TrimSpace(t[:len(t)-len(sf.s)])
			mult = sf.m
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("invalid size %q: want a non-negative number with an optional unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. 6GiB", s)
	}
	b := v * mult
	if b > math.MaxInt64 {
		return 0, fmt.Errorf("invalid size %q: larger than %d bytes", s, int64(math.MaxInt64))
	}
	return int64(b), nil
}

// FormatSize formats n bytes with a binary unit and two decimals ("1.50 GiB").
func FormatSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
