package registry

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"orkpipe/registry/regtest"
)

// BenchmarkTransfer2GiB measures push and pull of a generated 2 GiB file (256 MiB parts) through a
// real in-process registry on loopback, with 1 and 4 jobs, next to `cp` of the same file in the
// same run. Each sub-benchmark reports x_cp: its time per op divided by cp's (cp+sync is a second
// baseline: pull fsyncs each file before renaming it into place, cp does not).
//
//	go test ./registry -run '^$' -bench Transfer2GiB -benchtime 1x
func BenchmarkTransfer2GiB(b *testing.B) {
	const size = 2 << 30
	src := b.TempDir()
	file := filepath.Join(src, "big.orkpack")
	writeRandom(b, file, size, 1)
	reg := regtest.Start(b, nil)
	scratch := b.TempDir()
	var cpNs float64
	report := func(b *testing.B) {
		ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		if cpNs > 0 {
			b.ReportMetric(ns/cpNs, "x_cp")
		}
	}

	b.Run("cp", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			dst := filepath.Join(scratch, fmt.Sprintf("cp-%d", i))
			if out, err := exec.Command("cp", file, dst).CombinedOutput(); err != nil {
				b.Fatalf("cp: %v %s", err, out)
			}
			b.StopTimer()
			os.Remove(dst)
			b.StartTimer()
		}
		cpNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	// cp+sync: the same copy made durable, as pull makes every file durable before its rename.
	b.Run("cp+sync", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			dst := filepath.Join(scratch, fmt.Sprintf("cps-%d", i))
			if out, err := exec.Command("cp", file, dst).CombinedOutput(); err != nil {
				b.Fatalf("cp: %v %s", err, out)
			}
			if out, err := exec.Command("sync", dst).CombinedOutput(); err != nil {
				b.Fatalf("sync: %v %s", err, out)
			}
			b.StopTimer()
			os.Remove(dst)
			b.StartTimer()
		}
		report(b)
	})
	// sha256sum: one hashing pass over the file, the least a verified transfer costs per side.
	b.Run("sha256sum", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			if out, err := exec.Command("sha256sum", file).CombinedOutput(); err != nil {
				b.Fatalf("sha256sum: %v %s", err, out)
			}
		}
		report(b)
	})
	pushed := ""
	for _, jobs := range []int{1, 4} {
		b.Run(fmt.Sprintf("push/jobs=%d", jobs), func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				ref := reg.Ref(fmt.Sprintf("bench/push-j%d-%d", jobs, i), "v1") // a new repository: every layer uploads
				if _, err := Push(ctxT(b), src, ref, plain(reg), WithPartSize(256<<20), WithJobs(jobs), WithCreated(testCreated)); err != nil {
					b.Fatal(err)
				}
				pushed = ref
			}
			report(b)
		})
	}
	for _, jobs := range []int{1, 4} {
		b.Run(fmt.Sprintf("pull/jobs=%d", jobs), func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				dst := filepath.Join(scratch, fmt.Sprintf("pull-j%d-%d", jobs, i))
				if _, err := Pull(ctxT(b), pushed, dst, plain(reg), WithJobs(jobs)); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				os.RemoveAll(dst)
				b.StartTimer()
			}
			report(b)
		})
	}
}
