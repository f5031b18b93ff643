package testfiles

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// StatusKB returns the field key of the process's /proc/self/status in kB (VmHWM, the peak RSS the
// memory tests measure; VmRSS), or an error naming what is missing: a system without the file
// (not Linux), or without the field.
func StatusKB(key string) (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	v, err := StatusField(string(b), key)
	if err != nil {
		return 0, fmt.Errorf("/proc/self/status: %w", err)
	}
	return v, nil
}

// StatusField parses field key ("VmHWM:   123 kB") of a text in /proc's "key: value kB" form: a
// /proc/<pid>/status (a child process's lines its parent reads from the child's output, too) or
// /proc/meminfo. The value is in kB.
func StatusField(status, key string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("field %s: %w", key, err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("no field %s", key)
}
