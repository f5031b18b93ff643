//go:build race

package quant

// raceEnabled reports a -race build: the race detector's shadow memory and instrumented allocations
// inflate a process's resident set (stages' memory tests measured 1.04-2.91x their declared peaks
// under -race), so the tests that hold a measured peak RSS to a declared bound skip in it.
const raceEnabled = true
