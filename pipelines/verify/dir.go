package verify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"orkpipe/ork/board"
	"orkpipe/ork/boardhost"
)

// Well-known file names of a build directory.
const (
	ReportFile     = "report.json"
	ProvenanceFile = "provenance.json"
	PackExt        = ".orkpack"
	StubExt        = ".gguf" // the stub of x.orkpack is x.orkpack.gguf
)

// Files are the paths of a build directory's files.
type Files struct {
	Dir        string
	Pack       string
	Stub       string
	Report     string // report.json
	Provenance string // provenance.json
}

// Locate finds the files of the build directory dir: exactly one *.orkpack, its stub beside it,
// report.json and provenance.json. Anything missing is an error naming the path.
func Locate(dir string) (Files, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Files{}, err
	}
	ents, err := os.ReadDir(abs)
	if err != nil {
		return Files{}, fmt.Errorf("%w: %v", ErrLayout, err)
	}
	var packs []string
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), PackExt) && !strings.HasPrefix(e.Name(), ".") {
			packs = append(packs, e.Name())
		}
	}
	switch len(packs) {
	case 0:
		return Files{}, fmt.Errorf("%w: %s holds no *%s file", ErrLayout, abs, PackExt)
	case 1:
	default:
		return Files{}, fmt.Errorf("%w: %s holds %d packs (%s): want exactly one", ErrLayout, abs, len(packs), strings.Join(packs, ", "))
	}
	f := Files{Dir: abs, Pack: filepath.Join(abs, packs[0]), Stub: filepath.Join(abs, packs[0]+StubExt),
		Report: filepath.Join(abs, ReportFile), Provenance: filepath.Join(abs, ProvenanceFile)}
	for _, p := range []string{f.Stub, f.Report, f.Provenance} {
		st, err := os.Stat(p)
		if err != nil {
			return Files{}, fmt.Errorf("%w: %v", ErrLayout, err)
		}
		if !st.Mode().IsRegular() {
			return Files{}, fmt.Errorf("%w: %s is not a regular file", ErrLayout, p)
		}
	}
	return f, nil
}

// Result is the outcome of verifying a build directory.
type Result struct {
	Files   Files
	Profile board.Profile // the profile the fit and loader checks used (zero when none could be chosen)
	Report  *boardhost.Report
	// Unlisted names the regular files of the directory that provenance.json does not list, sorted:
	// nothing verified them (a board operator's directory may hold other files, so they fail no
	// check). provenance.json itself and orkpipe's own hidden files (".orkpipe-*") are not listed
	// here; nil when provenance.json could not be read (the integrity check then failed).
	Unlisted []string
}

// Dir verifies the build directory dir on this host and returns the report. Failed checks are in
// the report (Report.OK is false), not in the error; the error is reserved for a directory that is
// not a build directory, invalid options and a cancelled ctx.
func Dir(ctx context.Context, dir string, opts ...Option) (*Result, error) {
	cfg, err := makeConfig(opts)
	if err != nil {
		return nil, err
	}
	files, err := Locate(dir)
	if err != nil {
		return nil, err
	}
	res := &Result{Files: files, Report: &boardhost.Report{}}
	rep := res.Report
	log := cfg.logger.With("dir", files.Dir)

	log.Debug("verify: integrity")
	rep.Add("integrity", checkProvenance(ctx, files, cfg.jobs), "every file matches the sha256/BLAKE3 recorded in "+ProvenanceFile)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if res.Unlisted, err = unlisted(files); err != nil {
		return nil, err
	}
	if len(res.Unlisted) > 0 {
		log.Warn("verify: files not listed in "+ProvenanceFile+" were not verified", "files", res.Unlisted)
	}
	rep.Add("stub-header", checkStubHeader(ctx, files), "stub header region equals the source header recorded in "+ReportFile)

	log.Debug("verify: pack and loader coverage")
	pk := checkPack(ctx, files.Pack, cfg.profile)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep.Add("pack", pk.integrity, pk.integrityDetail)
	rep.Add("loader-coverage", pk.loader, pk.loaderDetail)

	log.Debug("verify: stub against pack")
	stubDetail, stubErr := checkStub(ctx, files.Stub, pk.entries, cfg.allowZero)
	rep.Add("stub", stubErr, stubDetail)

	fitDetail, fitErr := checkFit(pk, files.Pack)
	rep.Add("fit", fitErr, fitDetail)
	if pk.profile != nil {
		res.Profile = *pk.profile
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	collect := append([]boardhost.CollectOption(nil), cfg.collect...)
	if cfg.command != "" {
		argv, err := boardhost.SplitCommand(cfg.command)
		if err != nil {
			return nil, err
		}
		collect = append(collect, boardhost.WithProgram(argv[0]))
	}
	log.Debug("verify: fingerprint")
	fp, err := boardhost.Collect(ctx, collect...)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		rep.Add("fingerprint", err, "")
	default:
		rep.SetFingerprint(fp)
	}

	in := boardhost.Inputs{Pack: files.Pack, Stub: files.Stub, Text: cfg.text}
	if cfg.command == "" {
		hashed, err := boardhost.HashInputs(ctx, in)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			rep.Add("inputs", err, "")
		}
		rep.Inputs = hashed
		return res, nil
	}
	if failed := rep.Failed(); len(failed) > 0 {
		rep.Add("run", fmt.Errorf("not run: the pack did not verify (failed: %s)", strings.Join(failed, ", ")), "")
		hashed, _ := boardhost.HashInputs(ctx, in)
		rep.Inputs = hashed
		return res, nil
	}
	log.Debug("verify: run", "command", cfg.command)
	rec, runErr := boardhost.Run(ctx, cfg.command, in, cfg.run...)
	if runErr != nil && ctx.Err() != nil && errors.Is(runErr, ctx.Err()) {
		return nil, ctx.Err()
	}
	rep.SetRun(rec, runErr)
	return res, nil
}
