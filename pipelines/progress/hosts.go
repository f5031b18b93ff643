package progress

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"orkpipe/ork/hostspeed"
)

// HostsFile is where a cache keeps the speeds of the hosts and binaries that planned in it
// (hostspeed.Speeds: the cost model's speeds, measured once per host and orkpipe binary):
// <history dir>/_hosts, beside the rates.
func HostsFile(historyDir string) string { return filepath.Join(historyDir, "_hosts") }

// The hosts file's format:
//
//	{"version":1,"hosts":[{"host":H,"binary":B,"speeds":{"forward":F,...},"measured":RFC3339}, ...]}
//
// host is hostspeed.Host's description, binary the digest of the binary that measured (another build
// of orkpipe may have other kernels); at most maxHosts entries, the newest. A cache shared by several
// hosts keeps each one's.
const (
	hostsVersion = 1
	maxHosts     = 16
)

type hostsJSON struct {
	Version int         `json:"version"`
	Hosts   []hostEntry `json:"hosts"`
}

type hostEntry struct {
	Host     string           `json:"host"`
	Binary   string           `json:"binary"`
	Speeds   hostspeed.Speeds `json:"speeds"`
	Measured time.Time        `json:"measured"`
}

// LoadHostSpeeds returns the speeds the hosts file at path keeps for host and binary. When it keeps
// none, it calls measure (hostspeed.Measure) and adds what it returns to the file (created with its
// directory if missing, replaced whole through a temporary file under the same kind of lock as
// KeepCosts), and measured is true. A damaged file, or one of another format version, is replaced by
// the new measurement, and the error says so beside the speeds (use them); an error of measure is
// returned as it is.
func LoadHostSpeeds(ctx context.Context, path, host, binary string, measure func(context.Context) (hostspeed.Speeds, error)) (s hostspeed.Speeds, measured bool, err error) {
	if host == "" || binary == "" {
		return hostspeed.Speeds{}, false, fmt.Errorf("host speeds %s: want a host and a binary, have %q and %q", path, host, binary)
	}
	s, found, rerr := ReadHostSpeeds(path, host, binary)
	if found {
		return s, false, nil
	}
	if s, err = measure(ctx); err != nil {
		return hostspeed.Speeds{}, false, err
	}
	if err := s.Validate(); err != nil {
		return hostspeed.Speeds{}, false, err
	}
	if err := keepHost(path, hostEntry{Host: host, Binary: binary, Speeds: s, Measured: time.Now().UTC()}); err != nil {
		return s, true, fmt.Errorf("keeping this host's speeds in %s: %w", path, err)
	}
	if rerr != nil {
		return s, true, fmt.Errorf("%w (replaced by this host's measurement)", rerr)
	}
	return s, true, nil
}

// ReadHostSpeeds returns the speeds the hosts file at path keeps for host and binary (found false
// when it keeps none), reading only: for a cache this process cannot write, where LoadHostSpeeds
// could not keep a measurement. A damaged file, or one of another format version, keeps none, and
// the error says why.
func ReadHostSpeeds(path, host, binary string) (s hostspeed.Speeds, found bool, err error) {
	f, err := readHostsFile(path)
	for _, e := range f.Hosts {
		if e.Host == host && e.Binary == binary {
			return e.Speeds, true, nil
		}
	}
	return hostspeed.Speeds{}, false, err
}

// readHostsFile reads and checks the hosts file at path (strictly: no unknown fields, every entry
// with a host, a binary and valid speeds, none twice); a missing file holds no hosts, and so does a
// damaged one, with the error.
func readHostsFile(path string) (hostsJSON, error) {
	var f hostsJSON
	if found, err := readJSONFile(path, "host speeds", &f); !found || err != nil {
		return hostsJSON{Version: hostsVersion}, err
	}
	if err := f.check(); err != nil {
		return hostsJSON{Version: hostsVersion}, fmt.Errorf("host speeds %s: %w", path, err)
	}
	return f, nil
}

func (f hostsJSON) check() error {
	if f.Version != hostsVersion {
		return fmt.Errorf("version %d, want %d", f.Version, hostsVersion)
	}
	if len(f.Hosts) > maxHosts {
		return fmt.Errorf("%d hosts, want at most %d", len(f.Hosts), maxHosts)
	}
	seen := map[[2]string]bool{}
	for i, e := range f.Hosts {
		if e.Host == "" || e.Binary == "" {
			return fmt.Errorf("hosts[%d]: want a host and a binary", i)
		}
		if err := e.Speeds.Validate(); err != nil {
			return fmt.Errorf("hosts[%d]: %w", i, err)
		}
		k := [2]string{e.Host, e.Binary}
		if seen[k] {
			return fmt.Errorf("hosts[%d]: host %q and binary %s listed twice", i, e.Host, e.Binary)
		}
		seen[k] = true
	}
	return nil
}

// keepHost adds e to the hosts file at path, in place of an entry of the same host and binary, the
// oldest entries dropped past maxHosts; a damaged file is replaced (LoadHostSpeeds reports it).
func keepHost(path string, e hostEntry) error {
	unlock, err := lockCosts(path)
	if err != nil {
		return err
	}
	defer unlock()
	f, _ := readHostsFile(path)
	f.Hosts = slices.DeleteFunc(f.Hosts, func(o hostEntry) bool { return o.Host == e.Host && o.Binary == e.Binary })
	f.Hosts = append(f.Hosts, e)
	slices.SortStableFunc(f.Hosts, func(a, b hostEntry) int { return b.Measured.Compare(a.Measured) })
	f.Hosts = f.Hosts[:min(len(f.Hosts), maxHosts)]
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return writeFile(path, append(b, '\n'))
}
