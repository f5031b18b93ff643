package testfiles

import (
	"os"
	"os/exec"
	"strings"
)

// WrapEnv names the command line (fields separated by spaces) the running test binary was started
// under when it is another machine's (internal/crosstest sets it: "qemu-aarch64"), so that a test
// that starts its own binary again starts it under the same (SelfCommand): qemu-user runs no arm64
// child by itself where binfmt_misc does not hand such binaries to it.
const WrapEnv = "ORKPIPE_TEST_WRAP"

// SelfCommand is exec.Command of this test binary (os.Args[0]) with args, under WrapEnv's command
// line when it is set.
func SelfCommand(args ...string) *exec.Cmd {
	argv := append(strings.Fields(os.Getenv(WrapEnv)), os.Args[0])
	argv = append(argv, args...)
	return exec.Command(argv[0], argv[1:]...)
}
