//go:build !race

package artifacts

// raceEnabled reports a -race build (race_test.go).
const raceEnabled = false
