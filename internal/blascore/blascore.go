// Package blascore re-runs a -tags blas binary with the OpenBLAS kernel set its CPU deserves.
package blascore

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"orkpipe/ork/quant"
)

// Reexec re-runs this process with OPENBLAS_CORETYPE set when OpenBLAS (in a -tags
// blas build) fell back to its generic kernels on a CPU it did not recognise
// (quant.OpenBLASCoreAdvice): the variable is read only when the library loads, before main. On
// success it does not return. If the exec fails the run goes on — correct, only slower — after a
// warning on stderr that says what to set. A pure-Go build, a recognised CPU or a user's own
// OPENBLAS_CORETYPE never re-exec.
func Reexec(stderr io.Writer) {
	core, ok := quant.OpenBLASCoreAdvice()
	if !ok {
		return
	}
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, append(os.Environ(), quant.OpenBLASCoreEnv+"="+core))
	}
	fmt.Fprintf(stderr, "warning: OpenBLAS chose its generic %q kernels on this CPU and re-running with %s=%s failed (%v); linear algebra will be several times slower — set %s=%s\n",
		quant.OpenBLASCore(), quant.OpenBLASCoreEnv, core, err, quant.OpenBLASCoreEnv, core)
}
