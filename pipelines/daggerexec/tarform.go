package daggerexec

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"orkpipe/artifacts"
	"orkpipe/artifacts/sparse"
	"orkpipe/pipelines/nodeexec"
)

// An input with enough holes (a stub GGUF: the tensors its pack owns are holes) is sent in its tar
// form (package artifacts/sparse): only its data travels, and `orkpipe node exec` recreates the
// file with its holes in the container (nodeexec: <hex>/<hex>.tar). The engine's file sync would
// send every hole as zeros (a 27B stub: ~28 GiB for ~2.6 GiB of data) and store the file fully
// allocated.
//
// The archive is a function of the bytes only — its data extents are the 4 KiB blocks that are not
// all zero (sparse.ContentExtents), its name is the input's digest — so its upload is as
// content-addressed as an object's. Whether a file goes in tar form depends on its bytes too,
// with one shortcut: a file stored without any hole is sent as it is, unread (the store leaves
// zero runs of its objects as holes: adopted outputs at 4 KiB, ingested files in 64 KiB spans).
const (
	tarMinHoles = 64 << 10 // the zero bytes a tar form must leave out, at least
	tarMinShare = 16       // and at least this fraction (1/tarMinShare) of the file
)

// tarForm returns the tar form of the store object at p (digest d), written into the executor's
// archive directory, and the bytes of zeros it leaves out; or "" when the file travels as it is.
func (x *Executor) tarForm(ctx context.Context, d artifacts.Digest, p string) (path string, holes int64, err error) {
	if x.cfg.wholeInputs {
		return "", 0, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	size := st.Size()
	stored, err := sparse.DataExtents(f, size)
	if err != nil || !sparse.HasHoles(size, stored) {
		return "", 0, err
	}
	exts, err := sparse.ContentExtents(ctx, f, size)
	if err != nil {
		return "", 0, err
	}
	if holes = size - sparse.Len(exts); holes < tarMinHoles || holes*tarMinShare < size {
		return "", 0, nil
	}
	dir, err := x.archiveDir(ctx)
	if err != nil {
		return "", 0, err
	}
	path = filepath.Join(dir, d.Hex()+nodeexec.TarSuffix)
	tmp, err := os.CreateTemp(dir, d.Hex()+".part-*")
	if err != nil {
		return "", 0, err
	}
	_, err = sparse.WriteTar(ctx, tmp, f, d.Hex(), size, exts)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", 0, fmt.Errorf("writing the tar form of %s: %w", p, err)
	}
	return path, holes, nil
}

// archiveDir returns the directory of the executor's tar forms, a scratch directory of the store
// made on first need and removed by Close (the engine may read an upload again while the session
// lives).
func (x *Executor) archiveDir(ctx context.Context) (string, error) {
	x.archiveMu.Lock()
	defer x.archiveMu.Unlock()
	if x.archives == "" {
		dir, err := x.store.TempDir(ctx)
		if err != nil {
			return "", fmt.Errorf("scratch directory for tar forms: %w", err)
		}
		x.archives = dir
	}
	return x.archives, nil
}
