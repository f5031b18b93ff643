//go:build race

package registry

// raceEnabled reports a -race build: there TestLargeFileRanges round-trips a smaller pack (the
// detector makes the 2 GiB one take minutes) and does not hold the pull's peak RSS to its bound
// (the detector's shadow memory inflates it).
const raceEnabled = true
