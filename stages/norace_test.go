//go:build linux && !race

package stages_test

// raceEnabled reports a -race build (race_test.go); only the memory tests, which are Linux's, ask.
const raceEnabled = false
