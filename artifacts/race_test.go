//go:build race

package artifacts

// raceEnabled reports a -race build: the race detector's shadow memory inflates a process's
// resident set, so TestHashPathPeakRSS, which holds a child's peak RSS to a bound, skips in it (the
// parallel hash's goroutines are checked under -race by the other hash tests).
const raceEnabled = true
