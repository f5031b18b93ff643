package startheap

import (
	"strings"
	"testing"
)

func TestCommand(t *testing.T) {
	for _, c := range []struct {
		argv  string // space-separated; "" is no arguments
		want  string
		short bool
	}{
		{"", "", false},
		{"hash x", "hash", true},
		{"hash --no-cache x", "hash", true},
		{"version", "version", true},
		{"help build", "help", true},
		{"inspect pack.orkpack", "inspect", true},
		{"build r.yaml -o out", "build", false},
		{"node exec --key k", "node", false},
		{"eval m.gguf", "eval", false},
		{"pull reg/x:v1 -o d", "pull", false},
		{"--cache /tmp/c hash x", "hash", true},
		{"--cache=/tmp/c hash x", "hash", true},
		{"-j 2 hash x", "hash", true},
		{"-j2 hash x", "hash", true},
		{"-j=2 hash x", "hash", true},
		{"-vj 2 hash x", "2", false}, // cobra too reads "2" as the command (and fails)
		{"-vvj2 hash x", "hash", true},
		{"-vv --json hash x", "hash", true},
		{"--json=false --verbose=2 hash x", "hash", true},
		{"--jobs 2 --mem 1GiB --cpuprofile p build r.yaml", "build", false},
		{"--memprofile hash hash x", "hash", true}, // the first "hash" is --memprofile's value
		{"--cache hash hash x", "hash", true},      // the first "hash" is --cache's value
		{"--mem build hash", "hash", true},         // "build" is --mem's value (cobra then fails on it)
		{"-h", "", false},
		{"--no-cache hash x", "", false}, // not a global flag: unknown here
		{"-x hash", "", false},
		{"-vx hash", "", false},
		{"-- hash x", "", false},
		{"- hash", "", false},
		{"--cache", "", false},
		{"-j", "", false},
	} {
		var args []string
		if c.argv != "" {
			args = strings.Split(c.argv, " ")
		}
		if got := Command(args); got != c.want {
			t.Errorf("Command(%q) = %q, want %q", c.argv, got, c.want)
		}
		if got := IsShort(args); got != c.short {
			t.Errorf("IsShort(%q) = %v, want %v", c.argv, got, c.short)
		}
	}
}

func TestHasSetting(t *testing.T) {
	for _, c := range []struct {
		list string
		want bool
	}{
		{"", false},
		{"disablethp=1", true},
		{"inittrace=1,disablethp=1", true},
		{"disablethp=1,inittrace=1", true},
		{"disablethp=0", false},
		{"disablethp=1,disablethp=0", false},
		{"disablethp=10", false},
		{"xdisablethp=1", false},
	} {
		if got := hasSetting(c.list, "disablethp=1"); got != c.want {
			t.Errorf("hasSetting(%q) = %v, want %v", c.list, got, c.want)
		}
	}
}
