// Package buildinfo describes the running orkpipe binary: module version, VCS revision,
// dirty flag and the BLAKE3 digest of the executable file itself. Provenance records and
// `orkpipe version` use it, so a stale binary can always be told apart from a fresh one.
package buildinfo

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"

	"orkpipe/artifacts"
)

// Info describes the running binary.
type Info struct {
	Version   string           `json:"version"`
	Revision  string           `json:"revision,omitempty"`
	Time      string           `json:"vcs_time,omitempty"`
	Dirty     bool             `json:"dirty"`
	GoVersion string           `json:"go"`
	Platform  string           `json:"platform"`
	Path      string           `json:"path"`
	Digest    artifacts.Digest `json:"digest"`
}

var (
	once   sync.Once
	cached Info
	errBin error
)

// Get returns the description of the running binary. The executable is hashed once per process.
func Get() (Info, error) {
	once.Do(func() {
		cached = Info{Version: "(devel)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
		if bi, ok := debug.ReadBuildInfo(); ok {
			if bi.Main.Version != "" {
				cached.Version = bi.Main.Version
			}
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					cached.Revision = s.Value
				case "vcs.time":
					cached.Time = s.Value
				case "vcs.modified":
					cached.Dirty = s.Value == "true"
				}
			}
		}
		exe, err := os.Executable()
		if err != nil {
			errBin = fmt.Errorf("locating the orkpipe executable: %w", err)
			return
		}
		cached.Path = exe
		f, err := os.Open(exe)
		if err != nil {
			errBin = fmt.Errorf("hashing the orkpipe executable %s: %w", exe, err)
			return
		}
		defer f.Close()
		d, _, err := artifacts.SumReader(f)
		if err != nil {
			errBin = fmt.Errorf("hashing the orkpipe executable %s: %w", exe, err)
			return
		}
		cached.Digest = d
	})
	return cached, errBin
}
