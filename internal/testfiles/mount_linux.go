package testfiles

import "syscall"

// BindReadOnly bind-mounts dir read-only over itself: nothing under it can be written through that
// mount, by root either. Call it only in a child process started in a mount namespace of its own
// (SelfCommand with SysProcAttr.Unshareflags CLONE_NEWNS, which needs root): the mount goes with
// the child.
func BindReadOnly(dir string) error {
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return err
	}
	return syscall.Mount("", dir, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, "")
}
