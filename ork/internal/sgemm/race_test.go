//go:build race

package sgemm

// raceEnabled reports a -race build: TestNTMatchesGonum tries -short's layouts there (one goroutine
// and three, NTSerial among them), not every offset of B (the detector makes those a minute).
const raceEnabled = true
