package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
)

// startProfile starts the CPU profile --cpuprofile asks for and checks that --memprofile's file can be
// created (before the command runs, so that a bad path fails at once); finishProfile (called by main
// once the command returned, whatever its outcome) stops the CPU profile and writes the memory one.
func (o *globalOptions) startProfile() error {
	var stops []func() error
	if o.memProf != "" {
		f, err := os.Create(o.memProf)
		if err != nil {
			return usagef("--memprofile: %v", err)
		}
		stops = append(stops, func() error {
			// allocs: every sampled allocation since the start (what made garbage) and, in its
			// inuse sample types, what was still live at the end.
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
