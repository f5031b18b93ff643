package build

import (
	"os"

	"orkpipe/ork/board"
	"orkpipe/ork/gguf"
)

// Everything planning reads from outside the recipe goes through these three, and each thing read
// is a source input of the graph planned (the model, screen.text, a board profile file, ...): the
// contract of Target.PlanKey, under which a build memo serves a build without planning it.
// TestPlanReadsOnlySources records the reads of real plans and checks each against the graph's
// source files; TestPlanReadsThroughSeams fails on any other file or environment read in this
// package; TestPlanSyscallReads traces the file system calls of the same plans in a child process
// (strace), so that a read anywhere else — ork, stages, a library — is caught too.
var (
	openModel = gguf.Open  // the source model's header and tensor index
	statFile  = os.Stat    // a file's existence, type and size (checkFile, screen.text's size)
	loadBoard = board.Load // the board profile: a built-in name, or a profile file
)
