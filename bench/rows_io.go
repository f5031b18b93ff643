package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"orkpipe/artifacts"
	"orkpipe/registry/regtest"
)

// rowHash: orkpipe hash of the big file vs b3sum, sha256sum and cat > /dev/null (page cache warm).
func rowHash(e *env) (Row, error) {
	r := Row{ID: "hash", Title: fmt.Sprintf("hash %s", formatBytes(e.size)),
		Note: "page cache warm; orkpipe hash --no-cache re-hashes every run"}
	p, err := e.big()
	if err != nil {
		return r, err
	}
	r.Measures = []Measure{
		{Label: "cat > /dev/null", Role: "baseline", Bytes: e.size},
		{Label: "sha256sum", Role: "baseline", Bytes: e.size},
		{Label: "b3sum", Role: "baseline", Bytes: e.size},
		{Label: "orkpipe hash", Role: "subject", Bytes: e.size},
	}
	var steps []step
	for i, name := range []string{"cat", "sha256sum", "b3sum"} {
		m := &r.Measures[i]
		if _, why := tool(name); why != "" {
			m.Skipped = why
			continue
		}
		if name == "cat" {
			steps = append(steps, e.catStep(m, p))
		} else {
			steps = append(steps, e.cmdStep(m, nil, name, p))
		}
	}
	steps = append(steps, e.cmdStep(&r.Measures[3], nil, e.orkpipe, "hash", "--no-cache", p))
	return r, e.interleave(e.runs, steps...)
}

// rowCAS: ingest the big file into a fresh store and materialize it (library calls: the CLI has
// no ingest command) vs cp and cp + fsync.
func rowCAS(e *env) (Row, error) {
	r := Row{ID: "cas", Title: fmt.Sprintf("CAS ingest + materialize %s", formatBytes(e.size)),
		Note: "library: artifacts.Store.IngestFile then Materialize into a directory on the same filesystem (fresh store each run)"}
	p, err := e.big()
	if err != nil {
		return r, err
	}
	r.Measures = []Measure{
		{Label: "cp", Role: "baseline", Bytes: e.size},
		{Label: "cp + sync FILE", Role: "baseline", Bytes: e.size},
		{Label: "ingest + materialize", Role: "subject", Bytes: e.size,
			Command: "artifacts.OpenStore(DIR); IngestFile(ctx, FILE); Materialize(ctx, digest, OUT/FILE)"},
	}
	dst := filepath.Join(e.dir, "cas-cp.bin")
	rmDst := func() error { return os.RemoveAll(dst) }
	var steps []step
	if _, why := tool("cp"); why != "" {
		r.Measures[0].Skipped, r.Measures[1].Skipped = why, why
	} else {
		steps = append(steps, e.cmdStep(&r.Measures[0], rmDst, "cp", p, dst))
		r.Measures[1].Command = "cp FILE DST && sync DST"
		steps = append(steps, step{m: &r.Measures[1], prepare: rmDst, run: func() (time.Duration, int64, error) {
			return timed(func() error {
				if _, _, err := e.command(nil, "cp", p, dst); err != nil {
					return err
				}
				_, _, err := e.command(nil, "sync", dst)
				return err
			})
		}})
	}
	var storeDir, outDir string
	steps = append(steps, step{m: &r.Measures[2],
		prepare: func() error {
			var err error
			if storeDir, err = e.fresh("cas-store"); err != nil {
				return err
			}
			outDir, err = e.fresh("cas-out")
			return err
		},
		run: func() (time.Duration, int64, error) {
			return timed(func() error {
				s, err := artifacts.OpenStore(storeDir)
				if err != nil {
					return err
				}
				defer s.Close()
				obj, err := s.IngestFile(e.ctx, p)
				if err != nil {
					return err
				}
				mr, err := s.Materialize(e.ctx, obj.Digest, filepath.Join(outDir, "big.bin"), artifacts.MaterializeOptions{})
				if err != nil {
					return err
				}
				r.Measures[2].Extra = map[bool]string{true: "materialized as a hard link", false: "materialized as a copy"}[mr.Linked]
				return nil
			})
		}})
	err = e.interleave(e.runs, steps...)
	os.RemoveAll(dst)
	os.RemoveAll(filepath.Join(e.dir, "cas-store"))
	os.RemoveAll(filepath.Join(e.dir, "cas-out"))
	return r, err
}

// rowsPushPull: orkpipe push and pull of the big file through a local distribution registry (new
// repositories every round, so every byte is uploaded; a fresh cache and destination every run) vs cp, and vs oras when it is on PATH.
func rowsPushPull(e *env) ([]Row, error) {
	push := Row{ID: "push", Title: fmt.Sprintf("push %s", formatBytes(e.size)),
		Note: "local registry: distribution v3 (filesystem driver, internal/testregistry) as a child process, plain HTTP on 127.0.0.1; new repository and fresh orkpipe cache per run"}
	pull := Row{ID: "pull", Title: fmt.Sprintf("pull %s", formatBytes(e.size)),
		Note: "fresh destination and orkpipe cache per run; every range and the whole file verified (BLAKE3)"}
	p, err := e.big()
	if err != nil {
		return nil, err
	}
	src, err := e.fresh("push-src")
	if err != nil {
		return nil, err
	}
	if err := os.Link(p, filepath.Join(src, "big.bin")); err != nil {
		return nil, err
	}
	push.Measures = []Measure{{Label: "cp", Role: "baseline", Bytes: e.size}, {Label: "oras push", Role: "baseline", Bytes: e.size},
		{Label: "orkpipe push", Role: "subject", Bytes: e.size},
		{Label: "orkpipe push, build output", Role: "subject", Bytes: e.size, Versus: "oras push"}}
	pull.Measures = []Measure{{Label: "cp", Role: "baseline", Bytes: e.size}, {Label: "oras pull", Role: "baseline", Bytes: e.size},
		{Label: "orkpipe pull", Role: "subject", Bytes: e.size}}
	for _, rw := range []*Row{&push, &pull} {
		if _, why := tool("oras"); why != "" {
			rw.Measures[1].Skipped = why
		}
		if _, why := tool("crane"); why != "" {
			rw.Measures = append(rw.Measures, Measure{Label: "crane", Role: "baseline", Skipped: why})
		} else {
			rw.Measures = append(rw.Measures, Measure{Label: "crane", Role: "baseline",
				Skipped: "skipped: crane moves container images (tarballs, layers), it has no push/pull of a file artifact to compare with"})
		}
	}
	root, err := e.fresh("registry")
	if err != nil {
		return nil, err
	}
	reg, err := regtest.StartProcess(e.ctx, root) // distribution v3, a child process
	if err != nil {
		return nil, err
	}
	defer reg.Close()
	round := 0 // each round pushes to new repositories, so that every push uploads every byte
	cpDst := filepath.Join(e.dir, "pp-cp.bin")
	rmCp := func() error { return os.RemoveAll(cpDst) }
	cache := filepath.Join(e.dir, "pp-cache")
	pullDir := filepath.Join(e.dir, "pulled")
	ref := func() string { return fmt.Sprintf("%s/bench/big%d:v1", reg.Host, round) }
	orasRef := func() string { return fmt.Sprintf("%s/bench/oras%d:v1", reg.Host, round) }
	var pushSteps, pullSteps []step
	if _, why := tool("cp"); why != "" {
		push.Measures[0].Skipped, pull.Measures[0].Skipped = why, why
	} else {
		pushSteps = append(pushSteps, e.cmdStep(&push.Measures[0], rmCp, "cp", p, cpDst))
		pullSteps = append(pullSteps, e.cmdStep(&pull.Measures[0], rmCp, "cp", p, cpDst))
	}
	if push.Measures[1].Skipped == "" {
		push.Measures[1].Command = "oras push --plain-http HOST/bench/orasN:v1 big.bin"
		pushSteps = append(pushSteps, step{m: &push.Measures[1], run: func() (time.Duration, int64, error) {
			cmd := []string{"oras", "push", "--plain-http", orasRef(), "big.bin"}
			return e.commandIn(src, nil, cmd...)
		}})
		pull.Measures[1].Command = "oras pull --plain-http HOST/bench/orasN:v1 -o DIR"
		pullSteps = append(pullSteps, step{m: &pull.Measures[1], prepare: func() error { return os.RemoveAll(pullDir) },
			run: func() (time.Duration, int64, error) {
				return e.command(nil, "oras", "pull", "--plain-http", orasRef(), "-o", pullDir)
			}})
	}
	push.Measures[2].Command = "orkpipe --cache C push DIR HOST/bench/bigN:v1 --plain-http"
	pushSteps = append(pushSteps, step{m: &push.Measures[2],
		prepare: func() error { return os.RemoveAll(cache) },
		run: func() (time.Duration, int64, error) {
			return e.command(nil, e.orkpipe, "--cache", cache, "push", src, ref(), "--plain-http")
		}})
	pull.Measures[2].Command = "orkpipe --cache C pull HOST/bench/bigN:v1 -o DIR --plain-http"
	pullSteps = append(pullSteps, step{m: &pull.Measures[2],
		prepare: func() error {
			if err := os.RemoveAll(pullDir); err != nil {
				return err
			}
			return os.RemoveAll(cache)
		},
		run: func() (time.Duration, int64, error) {
			return e.command(nil, e.orkpipe, "--cache", cache, "pull", ref(), "-o", pullDir, "--plain-http")
		}})
	// A build output: the file materialized from a cache that keeps it, pushed once before the
	// measured runs, so that its digests are remembered beside the object (hashed never again).
	kept, err := e.fresh("pp-kept")
	if err != nil {
		return nil, err
	}
	out, err := e.fresh("pp-out")
	if err != nil {
		return nil, err
	}
	if err := keptOutput(e, p, kept, filepath.Join(out, "big.bin")); err != nil {
		return nil, err
	}
	if _, _, err := e.command(nil, e.orkpipe, "--cache", kept, "push", out, reg.Host+"/bench/warm:v1", "--plain-http"); err != nil {
		return nil, err
	}
	push.Measures[3].Command = "orkpipe --cache KEPT push OUT HOST/bench/outN:v1 --plain-http (OUT materialized from KEPT, pushed once before)"
	pushSteps = append(pushSteps, step{m: &push.Measures[3], run: func() (time.Duration, int64, error) {
		return e.command(nil, e.orkpipe, "--cache", kept, "push", out, fmt.Sprintf("%s/bench/out%d:v1", reg.Host, round), "--plain-http")
	}})
	// One round: push, then pull what was just pushed.
	for round = 0; round < e.runs; round++ {
		if err := e.interleave(1, pushSteps...); err != nil {
			return []Row{push, pull}, err
		}
		if err := e.interleave(1, pullSteps...); err != nil {
			return []Row{push, pull}, err
		}
	}
	for _, d := range []string{cpDst, cache, pullDir, src, kept, out, filepath.Join(e.dir, "registry")} {
		os.RemoveAll(d)
	}
	return []Row{push, pull}, nil
}

// keptOutput ingests the file at p into the store at dir and materializes it at dst (a hard link):
// a build output as orkpipe leaves it.
func keptOutput(e *env, p, dir, dst string) error {
	s, err := artifacts.OpenStore(dir)
	if err != nil {
		return err
	}
	defer s.Close()
	obj, err := s.IngestFile(e.ctx, p)
	if err != nil {
		return err
	}
	_, err = s.Materialize(e.ctx, obj.Digest, dst, artifacts.MaterializeOptions{})
	return err
}
