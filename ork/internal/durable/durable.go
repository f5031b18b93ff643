// Package durable holds the file-durability step the ork packages share: making a rename durable.
// (artifacts, which may not import ork, has its own: artifacts.SyncDir.)
package durable

import (
	"fmt"
	"os"
)

// SyncDir fsyncs directory dir, so that a file created or renamed in it survives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}
