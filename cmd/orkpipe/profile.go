package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startProfile starts the CPU profile --cpuprofile asks for; finishProfile (called by main once the
// command returned, whatever its outcome) stops it and closes the file.
func (o *globalOptions) startProfile() error {
	if o.cpuProf == "" {
		return nil
	}
	f, err := os.Create(o.cpuProf)
	if err != nil {
		return usagef("--cpuprofile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("--cpuprofile %s: %w", o.cpuProf, err)
	}
	o.stopProfile = func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("--cpuprofile %s: %w", o.cpuProf, err)
		}
		return nil
	}
	return nil
}

// finishProfile stops the profile started by startProfile, if any.
func (o *globalOptions) finishProfile() error {
	if o.stopProfile == nil {
		return nil
	}
	stop := o.stopProfile
	o.stopProfile = nil
	return stop()
}
