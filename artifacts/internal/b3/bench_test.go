package b3

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/zeebo/blake3"
)

// BenchmarkParallelScaling hashes 256 MiB in memory serially (upstream Sum256) and as 4 MiB
// subtrees on GOMAXPROCS goroutines, alternating within each iteration, and reports the speedup
// (serial time / parallel time). No I/O: this is the CPU scaling of the tree split alone. On a
// machine whose CPUs are busy with other sessions it stays near 1.
//
//	go test -run='^$' -bench=ParallelScaling -benchtime=10x ./artifacts/internal/b3
func BenchmarkParallelScaling(b *testing.B) {
	data := make([]byte, 256<<20)
	const piece = 4 << 20
	workers := runtime.GOMAXPROCS(0)
	var serial, parallel time.Duration
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		t0 := time.Now()
		want := blake3.Sum256(data)
		serial += time.Since(t0)

		t0 = time.Now()
		cvs := make([]CV, len(data)/piece)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(cvs); i += workers {
					cvs[i] = SubtreeCV(data[i*piece:(i+1)*piece], uint64(i*piece/ChunkLen))
				}
			}()
		}
		wg.Wait()
		got := Tree(cvs)
		parallel += time.Since(t0)
		if got != want {
			b.Fatalf("parallel %x != serial %x", got, want)
		}
	}
	b.ReportMetric(float64(serial)/float64(parallel), "speedup")
	b.ReportMetric(float64(len(data))*float64(b.N)/1e6/serial.Seconds(), "serial-MB/s")
	b.ReportMetric(float64(len(data))*float64(b.N)/1e6/parallel.Seconds(), "parallel-MB/s")
}
