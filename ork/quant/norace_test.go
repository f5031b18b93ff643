//go:build !race

package quant

// raceEnabled reports a -race build (race_test.go).
const raceEnabled = false
