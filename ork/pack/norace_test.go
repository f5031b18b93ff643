//go:build !race

package pack

// raceEnabled reports a -race build (race_test.go).
const raceEnabled = false
