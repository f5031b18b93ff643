//go:build race

package pack

// raceEnabled reports a -race build: the tests that only repeat single-goroutine work at scale do
// less of it there (the detector makes them minutes), keeping every concurrent path.
const raceEnabled = true
