package artifacts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// BenchmarkStore2GiB measures the store's paths on one 2 GiB file of pseudo-random bytes (page cache warm)
// against the tools a release engineer would use, interleaved: every iteration runs each
// operation once, in turn, so that load drifts on a shared machine hit all of them. It reports
// the median seconds of each and the ratios:
//
//	hash_x_b3sum     orkpipe's HashPath time over `b3sum` (<= 1 means at least as fast)
//	hash_x_cat       HashPath over `cat > /dev/null` (the read limit)
//	ingest_x_cp      IngestFile + Materialize (hard link) over `cp`
//	ingest_x_cpsync  the same over `cp` then sync(1) of the copy (ingest fsyncs every object)
//	matcopy_x_cp     Materialize by copy (another filesystem, or no hard links) over `cp`
//
// A baseline tool that is not installed is skipped with a message naming its Debian package.
//
//	go test ./artifacts -run '^$' -bench Store2GiB -benchtime 3x
func BenchmarkStore2GiB(b *testing.B) {
	const size = 2 << 30
	dir := b.TempDir()
	src := filepath.Join(dir, "model.bin")
	writeRandomFile(b, src, size)
	s, err := OpenStore(filepath.Join(dir, "cache"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	tool := func(name, pkg string) bool {
		if _, err := exec.LookPath(name); err != nil {
			b.Logf("%s not on PATH (apt-get install -y %s): its baseline is skipped", name, pkg)
			return false
		}
		return true
	}
	sh := func(cmd string) func() error {
		return func() error {
			out, err := exec.Command("sh", "-c", cmd).CombinedOutput()
			if err != nil {
				b.Fatalf("%s: %v %s", cmd, err, out)
			}
			return nil
		}
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		b.Fatal(err)
	}
	type op struct {
		name string
		run  func() error
	}
	ops := []op{
		{"cat", sh("cat " + src + " > /dev/null")},
		{"cp", func() error {
			defer os.Remove(filepath.Join(dir, "cp"))
			return sh("cp " + src + " " + filepath.Join(dir, "cp"))()
		}},
		{"cp+sync", func() error {
			defer os.Remove(filepath.Join(dir, "cp"))
			return sh("cp " + src + " " + filepath.Join(dir, "cp") + " && sync " + filepath.Join(dir, "cp"))()
		}},
		{"hash", func() error { _, err := HashPath(ctx, src); return err }},
		{"ingest+materialize", func() error {
			t0 := time.Now()
			o, err := s.IngestFile(ctx, src)
			if err != nil {
				return err
			}
			s.forceCopy = false
			dst := filepath.Join(out, "linked")
			if _, err := s.Materialize(ctx, o.Digest, dst, MaterializeOptions{}); err != nil {
				return err
			}
			ingest = append(ingest, time.Since(t0))
			s.forceCopy = true
			dst2 := filepath.Join(out, "copied")
			t0 = time.Now()
			if _, err := s.Materialize(ctx, o.Digest, dst2, MaterializeOptions{}); err != nil {
				return err
			}
			matCopy = append(matCopy, time.Since(t0))
			os.Remove(dst)
			os.Remove(dst2)
			return os.Remove(s.objectPath(o.Digest)) // the next round ingests afresh
		}},
	}
	if tool("b3sum", "b3sum") {
		ops = append(ops, op{"b3sum", sh("b3sum " + src + " > /dev/null")})
	}
	times := map[string][]time.Duration{}
	matCopy, ingest = nil, nil
	for b.Loop() {
		for _, o := range ops {
			t0 := time.Now()
			if err := o.run(); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t0)
			if o.name == "ingest+materialize" {
				d = ingest[len(ingest)-1] // without the copy and the clean-up
			}
			times[o.name] = append(times[o.name], d)
		}
	}
	med := func(ds []time.Duration) float64 {
		ds = append([]time.Duration(nil), ds...)
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2].Seconds()
	}
	for name, ds := range times {
		b.ReportMetric(med(ds), name+"_s")
	}
	b.ReportMetric(med(matCopy), "matcopy_s")
	if _, ok := times["b3sum"]; ok {
		b.ReportMetric(med(times["hash"])/med(times["b3sum"]), "hash_x_b3sum")
	}
	b.ReportMetric(med(times["hash"])/med(times["cat"]), "hash_x_cat")
	b.ReportMetric(med(times["ingest+materialize"])/med(times["cp"]), "ingest_x_cp")
	b.ReportMetric(med(times["ingest+materialize"])/med(times["cp+sync"]), "ingest_x_cpsync")
	b.ReportMetric(med(matCopy)/med(times["cp"]), "matcopy_x_cp")
	b.ReportMetric(0, "ns/op")
}

// ingest and matCopy collect the IngestFile+Materialize (link) and Materialize-by-copy times of
// BenchmarkStore2GiB.
var ingest, matCopy []time.Duration

// writeRandomFile writes size bytes of a repeating pseudo-random pattern to path (no zero runs).
func writeRandomFile(b *testing.B, path string, size int64) {
	b.Helper()
	writeRandomFileChunks(b, path, size, 4<<20)
}

// writeRandomFileChunks is writeRandomFile in writes of chunk bytes.
func writeRandomFileChunks(b *testing.B, path string, size int64, chunk int) {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	r := newPatternReader("speed", size)
	buf := make([]byte, chunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := f.Write(buf[:n]); werr != nil {
				b.Fatal(werr)
			}
		}
		if err != nil {
			break
		}
	}
}

// BenchmarkHash2GiB compares hashing a 2 GiB file (page cache warm), interleaved in every
// iteration: `cat > /dev/null` (the read limit), `b3sum` (SIMD, all cores, mmap), `sha256sum`, and
// HashPath three ways: as it runs (the probe of both, the default), mapped and read. It reports
// medians and hash_x_b3sum (HashPath time over b3sum's: <= 1 is at least as fast), hash_x_cat,
// mapped_x_read and hash_x_best (the probe's time over the faster way's). The file is written in
// writes of 4 MiB (written4MiB) and of 1 MiB (written1MiB, as cp and most downloads write): on some
// kernels the page cache holds the second in small folios, which cost a mapped hash far more page
// table work (docs/performance-log.md, "Hashing, session 24"). Missing tools are skipped with a message
// naming their Debian package.
//
//	go test ./artifacts -run '^$' -bench Hash2GiB -benchtime 5x
func BenchmarkHash2GiB(b *testing.B) {
	for _, w := range []struct {
		name  string
		chunk int
	}{{"written4MiB", 4 << 20}, {"written1MiB", 1 << 20}} {
		b.Run(w.name, func(b *testing.B) { benchHash2GiB(b, w.chunk) })
	}
}

func benchHash2GiB(b *testing.B, chunk int) {
	const size = 2 << 30
	src := filepath.Join(b.TempDir(), "model.bin")
	writeRandomFileChunks(b, src, size, chunk)
	ctx := context.Background()
	run := func(cmd string) func() error {
		return func() error {
			if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
				b.Fatalf("%s: %v %s", cmd, err, out)
			}
			return nil
		}
	}
	hash := func(mode pieceMode) func() error {
		return func() error {
			defer func() { hashMode = probePieces }()
			hashMode = mode
			_, err := HashPath(ctx, src)
			return err
		}
	}
	names := []string{"cat", "hash", "hash-mapped", "hash-read"}
	ops := map[string]func() error{"cat": run("cat " + src + " > /dev/null"), "hash": hash(probePieces),
		"hash-mapped": hash(mapPieces), "hash-read": hash(readPieces)}
	for _, t := range [][2]string{{"b3sum", "b3sum"}, {"sha256sum", "coreutils"}} {
		if _, err := exec.LookPath(t[0]); err != nil {
			b.Logf("%s not on PATH (apt-get install -y %s): its baseline is skipped", t[0], t[1])
			continue
		}
		names = append(names, t[0])
		ops[t[0]] = run(t[0] + " " + src + " > /dev/null")
	}
	times := map[string][]time.Duration{}
	for b.Loop() {
		for _, n := range names {
			t0 := time.Now()
			if err := ops[n](); err != nil {
				b.Fatal(err)
			}
			times[n] = append(times[n], time.Since(t0))
		}
	}
	med := func(n string) float64 {
		ds := append([]time.Duration(nil), times[n]...)
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2].Seconds()
	}
	for _, n := range names {
		b.ReportMetric(med(n), n+"_s")
	}
	if _, ok := times["b3sum"]; ok {
		b.ReportMetric(med("hash")/med("b3sum"), "hash_x_b3sum")
	}
	b.ReportMetric(med("hash")/med("cat"), "hash_x_cat")
	b.ReportMetric(med("hash-mapped")/med("hash-read"), "mapped_x_read")
	b.ReportMetric(med("hash")/min(med("hash-mapped"), med("hash-read")), "hash_x_best")
	b.ReportMetric(0, "ns/op")
}
