package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfile starts the CPU profile --cpuprofile asks for and creates --memprofile's file (before
// the command runs, so that a bad path fails at once); finishProfile (called by main once the
// command returned, whatever its outcome) stops the CPU profile and writes the memory one.
func (o *globalOptions) startProfile() error {
	var stops []func() error
	if o.cpuProf != "" {
		f, err := os.Create(o.cpuProf)
		if err != nil {
			return usagef("--cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("--cpuprofile %s: %w", o.cpuProf, err)
		}
		stops = append(stops, func() error {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				return fmt.Errorf("--cpuprofile %s: %w", o.cpuProf, err)
			}
			return nil
		})
	}
	if o.memProf != "" {
		f, err := os.Create(o.memProf)
		if err != nil {
			for _, stop := range stops {
				stop()
			}
			return usagef("--memprofile: %v", err)
		}
		stops = append(stops, func() error {
			// The allocation profile is as of the last collection: collect first, as go test's
			// -memprofile does, so that it covers the whole command. "allocs" has every sampled
			// allocation since the start (what made garbage) and, as inuse_*, what was still live.
			runtime.GC()
			err := pprof.Lookup("allocs").WriteTo(f, 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("--memprofile %s: %w", o.memProf, err)
			}
			return nil
		})
	}
	if len(stops) > 0 {
		o.stopProfile = func() error {
			var errs []error
			for _, stop := range stops {
				errs = append(errs, stop())
			}
			return errors.Join(errs...)
		}
	}
	return nil
}

// finishProfile stops the profiles started by startProfile, if any.
func (o *globalOptions) finishProfile() error {
	if o.stopProfile == nil {
		return nil
	}
	stop := o.stopProfile
	o.stopProfile = nil
	return stop()
}
