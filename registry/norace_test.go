//go:build !race

package registry

// raceEnabled reports a -race build (race_test.go).
const raceEnabled = false
