//go:build !race

package dgemm

// raceEnabled reports a -race build (sync.Pool then drops buffers at random).
const raceEnabled = false
