package registry

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"orkpipe/registry/regtest"
)

// BenchmarkTransfer2GiB measures push and pull of a generated 2 GiB file (256 MiB parts, 4 jobs)
// through a real in-process registry on loopback. Every iteration runs the baseline and the subject
// back to back (cp, subject, cp+sync), so load drifts on a shared machine hit both; each
// sub-benchmark reports its median time per op over cp's (x_cp) and over cp followed by sync(1) of
// the copy (x_cpsync: pull fsyncs each file before renaming it into place, cp does not).
//
//	go test ./registry -run '^$' -bench Transfer2GiB -benchtime 3x
func BenchmarkTransfer2GiB(b *testing.B) {
	const size = 2 << 30
	src := b.TempDir()
	file := filepath.Join(src, "big.orkpack")
	writeRandom(b, file, size, 1)
	reg := regtest.Start(b, nil)
	scratch := b.TempDir()
	pushed := reg.Ref("bench/setup", "v1")
	if _, err := Push(ctxT(b), src, pushed, plain(reg), testRange, WithCreated(testCreated)); err != nil {
		b.Fatal(err)
	}
	cp := func(b *testing.B, sync bool) time.Duration {
		dst := filepath.Join(scratch, "cp")
		t0 := time.Now()
		if out, err := exec.Command("cp", file, dst).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v %s", err, out)
		}
		if sync {
			if out, err := exec.Command("sync", dst).CombinedOutput(); err != nil {
				b.Fatalf("sync: %v %s", err, out)
			}
		}
		d := time.Since(t0)
		os.Remove(dst)
		return d
	}
	run := func(b *testing.B, subject func(i int) time.Duration) {
		b.SetBytes(size)
		var cps, cpss, subs []time.Duration
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			cps = append(cps, cp(b, false))
			b.StartTimer()
			subs = append(subs, subject(i))
			b.StopTimer()
			cpss = append(cpss, cp(b, true))
			b.StartTimer()
		}
		med := func(ds []time.Duration) float64 {
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			return float64(ds[len(ds)/2])
		}
		b.ReportMetric(med(subs)/med(cps), "x_cp")
		b.ReportMetric(med(subs)/med(cpss), "x_cpsync")
		b.ReportMetric(med(cps)/1e9, "cp_s")
		b.ReportMetric(med(subs)/1e9, "subject_s")
	}
	b.Run("push", func(b *testing.B) {
		run(b, func(i int) time.Duration {
			ref := reg.Ref(fmt.Sprintf("bench/push-%d-%d", b.N, i), "v1") // a new repository: every layer uploads
			t0 := time.Now()
			if _, err := Push(ctxT(b), src, ref, plain(reg), testRange, WithCreated(testCreated)); err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		})
	})
	b.Run("pull", func(b *testing.B) {
		run(b, func(i int) time.Duration {
			dst := filepath.Join(scratch, "pull")
			t0 := time.Now()
			if _, err := Pull(ctxT(b), pushed, dst, plain(reg)); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t0)
			os.RemoveAll(dst)
			return d
		})
	})
}
