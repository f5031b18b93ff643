//go:build !race

package sgemm

// raceEnabled reports a -race build (race_test.go).
const raceEnabled = false
