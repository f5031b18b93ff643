//go:build !race

package stages_test

// raceEnabled reports a -race build (race_test.go).
const raceEnabled = false
