//go:build race

package pack

// raceEnabled reports a -race build: TestCheckDataRejectsWhatDecodeRejects, every byte flip of small
// entries on one goroutine, is left to the plain run there (the detector makes it 20 s and finds
// nothing to check in it), and TestWriterStreamsBoundedMemory writes fewer entries (RaceEnabled).
const raceEnabled = true
