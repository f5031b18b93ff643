package progress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"orkpipe/ork/hostspeed"
)

// measuring returns a measure func that gives s and counts its calls in n.
func measuring(s hostspeed.Speeds, n *int) func(context.Context) (hostspeed.Speeds, error) {
	return func(context.Context) (hostspeed.Speeds, error) { *n++; return s, nil }
}

// TestLoadHostSpeeds: a host measures once per binary; its speeds are kept and given back as they
// were; another binary measures again beside it; a damaged file is named and replaced; what measure
// returns wrong is an error and nothing is kept.
func TestLoadHostSpeeds(t *testing.T) {
	ctx := context.Background()
	path := HostsFile(filepath.Join(t.TempDir(), "history"))
	a := hostspeed.Speeds{Forward: 0.5, Hessian: 0.6, Dgemm: 0.7, IntMatMul: 0.3, Scalar: 0.9}
	var n int
	if s, measured, err := LoadHostSpeeds(ctx, path, "host A", "blake3:1", measuring(a, &n)); err != nil || !measured || s != a {
		t.Fatalf("first Load: %+v measured %v, %v", s, measured, err)
	}
	if s, measured, err := LoadHostSpeeds(ctx, path, "host A", "blake3:1", measuring(hostspeed.Reference, &n)); err != nil || measured || s != a || n != 1 {
		t.Fatalf("second Load: %+v measured %v (%d measurements), %v; want %+v as kept", s, measured, n, err, a)
	}
	if _, measured, err := LoadHostSpeeds(ctx, path, "host A", "blake3:2", measuring(hostspeed.Reference, &n)); err != nil || !measured {
		t.Fatalf("another binary: measured %v, %v", measured, err)
	}
	if f, err := readHostsFile(path); err != nil || len(f.Hosts) != 2 {
		t.Fatalf("the file after two binaries: %+v, %v", f, err)
	}
	if err := os.WriteFile(path, []byte(`{"version":1,"hosts":[{"host":"host A"`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, measured, err := LoadHostSpeeds(ctx, path, "host A", "blake3:1", measuring(a, &n))
	if err == nil || !measured || s != a || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("Load of a damaged file: %+v measured %v, %v; want the speeds, the file named and replaced", s, measured, err)
	}
	if _, measured, err := LoadHostSpeeds(ctx, path, "host A", "blake3:1", measuring(a, &n)); err != nil || measured {
		t.Fatalf("Load after the damaged file was replaced: measured %v, %v", measured, err)
	}
	before, _ := os.ReadFile(path)
	failing := errors.New("probe failed")
	if _, _, err := LoadHostSpeeds(ctx, path, "host B", "blake3:1", func(context.Context) (hostspeed.Speeds, error) { return a, failing }); !errors.Is(err, failing) {
		t.Errorf("a failing measurement: %v", err)
	}
	bad := a
	bad.Scalar = 0
	if _, _, err := LoadHostSpeeds(ctx, path, "host B", "blake3:1", measuring(bad, &n)); err == nil || !strings.Contains(err.Error(), "scalar 0") {
		t.Errorf("a measurement out of range: %v", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Errorf("failed measurements changed the file:\n%s\nwas\n%s", after, before)
	}
	if _, _, err := LoadHostSpeeds(ctx, path, "", "blake3:1", measuring(a, &n)); err == nil {
		t.Error("Load with no host: no error")
	}
}

// TestKeepHostBounded: past maxHosts the oldest entries go.
func TestKeepHostBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "_hosts")
	base := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for i := range maxHosts + 3 {
		if err := keepHost(path, hostEntry{Host: "h", Binary: fmt.Sprint(i), Speeds: hostspeed.Reference, Measured: base.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	f, err := readHostsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Hosts) != maxHosts {
		t.Fatalf("%d hosts kept, want %d", len(f.Hosts), maxHosts)
	}
	for _, e := range f.Hosts {
		if e.Binary == "0" || e.Binary == "1" || e.Binary == "2" {
			t.Errorf("binary %s kept: the three oldest should have gone", e.Binary)
		}
	}
}

// TestReadHostsRejects: each kind of damage is an error naming the file and what is wrong.
func TestReadHostsRejects(t *testing.T) {
	good := hostEntry{Host: "h", Binary: "b", Speeds: hostspeed.Reference}
	enc := func(f any) string { b, _ := json.Marshal(f); return string(b) }
	many := hostsJSON{Version: hostsVersion}
	for i := range maxHosts + 1 {
		e := good
		e.Binary = fmt.Sprint(i)
		many.Hosts = append(many.Hosts, e)
	}
	bad := good
	bad.Speeds.Dgemm = 1000
	for _, tc := range []struct{ name, text, want string }{
		{"not JSON", "{", "unexpected EOF"},
		{"unknown field", `{"version":1,"hosts":[],"extra":1}`, "unknown field"},
		{"version", `{"version":2,"hosts":[]}`, "version 2, want 1"},
		{"no host", enc(hostsJSON{Version: 1, Hosts: []hostEntry{{Binary: "b", Speeds: hostspeed.Reference}}}), "hosts[0]: want a host"},
		{"bad speed", enc(hostsJSON{Version: 1, Hosts: []hostEntry{bad}}), "hosts[0]: host speed dgemm 1000"},
		{"twice", enc(hostsJSON{Version: 1, Hosts: []hostEntry{good, good}}), "hosts[1]: host \"h\" and binary b listed twice"},
		{"too many", enc(many), "17 hosts, want at most 16"},
	} {
		path := filepath.Join(t.TempDir(), "_hosts")
		if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := readHostsFile(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming the file and %q", tc.name, err, tc.want)
		}
	}
}

// FuzzReadHosts: readHostsFile never panics, and what it accepts is valid and is kept and read back
// with the same entries.
func FuzzReadHosts(f *testing.F) {
	f.Add([]byte(`{"version":1,"hosts":[{"host":"h","binary":"b","speeds":{"forward":1,"hessian":1,"dgemm":1,"intmatmul":1,"scalar":1},"measured":"2026-12-07T00:00:00Z"}]}`))
	f.Add([]byte(`{"version":1,"hosts":[]}`))
	f.Add([]byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "_hosts")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := readHostsFile(path)
		if err != nil {
			return
		}
		for _, e := range p.Hosts {
			if err := e.Speeds.Validate(); err != nil || e.Host == "" || e.Binary == "" {
				t.Fatalf("accepted %+v: %v", e, err)
			}
		}
		if err := keepHost(path, hostEntry{Host: "fuzz", Binary: "fuzz", Speeds: hostspeed.Reference}); err != nil {
			t.Fatal(err)
		}
		others := len(slices.DeleteFunc(p.Hosts, func(e hostEntry) bool { return e.Host == "fuzz" && e.Binary == "fuzz" }))
		q, err := readHostsFile(path)
		if err != nil || len(q.Hosts) != min(maxHosts, others+1) {
			t.Fatalf("kept beside %d hosts: %d hosts, %v", len(p.Hosts), len(q.Hosts), err)
		}
	})
}
