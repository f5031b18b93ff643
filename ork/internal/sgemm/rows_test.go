package sgemm

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"orkpipe/internal/testfiles"
)

// matrixRows is Rows over a matrix in memory that checks NTRows' side of the contract: rows in range,
// k0 = 0 or a multiple of BlockK, k1 = min(k0+BlockK, k) or k, dst exactly the values asked for; fail,
// when set, is returned for a decode that touches that row.
type matrixRows struct {
	b       []float32
	n, k    int
	fail    int
	mu      sync.Mutex
	decoded int
	most    int // the largest decode
	bad     string
}

var errDecode = errors.New("decode failed")

func (r *matrixRows) Decode(dst []float32, j0, j1, k0, k1 int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case j0 < 0 || j1 > r.n || j0 >= j1:
		r.bad = fmt.Sprintf("rows [%d, %d) of %d", j0, j1, r.n)
	case k0 != 0 && k0%BlockK != 0, k1 != r.k && k1 != k0+BlockK, k1 > r.k, k0 >= k1:
		r.bad = fmt.Sprintf("values [%d, %d) of %d", k0, k1, r.k)
	case len(dst) != (j1-j0)*(k1-k0):
		r.bad = fmt.Sprintf("dst of %d values for rows [%d, %d), values [%d, %d)", len(dst), j0, j1, k0, k1)
	}
	if r.bad != "" {
		return errors.New(r.bad)
	}
	if r.fail >= j0 && r.fail < j1 {
		return errDecode
	}
	for j := j0; j < j1; j++ {
		copy(dst[(j-j0)*(k1-k0):(j-j0+1)*(k1-k0)], r.b[j*r.k+k0:j*r.k+k1])
	}
	r.decoded += len(dst)
	r.most = max(r.most, len(dst))
	return nil
}

// TestNTRowsMatchesNT checks NTRows against NT over the same B in memory, bit for bit, with every set
// of kernels this CPU can run: rows of A below packRows and above it (threes and one or two past them),
// columns past whole fours and sixteens, K whole and in slices (and blocks of BlockK with a short last
// one), beta 0 and 1, one goroutine and three; each value of B decoded once a pass over it.
func TestNTRowsMatchesNT(t *testing.T) {
	if !DecodesRows(16) {
		testfiles.SkipCPU(t, "no AVX2: NTRows does not run")
	}
	r := rand.New(rand.NewPCG(21, 22))
	for _, s := range [][3]int{{1, 4, 16}, {3, 7, 48}, {15, 260, 512}, {16, 260, 1024}, {17, 70, 1040}, {64, 130, 2048},
		{128, 256, 64}, {20, 1000, 528}, {2, 9, 2064}, {130, 67, 1536}} {
		m, n, k := s[0], s[1], s[2]
		a := values(r, m*k)
		b := values(r, n*k+16)
		b = b[(16-int(uintptr(ptr(b))%16))%16/4:][:n*k]
		for _, beta := range []float32{0, 1} {
			for _, procs := range []int{1, 3} {
				c0 := values(r, m*n)
				forKernels(t, func(kernels string) {
					prev := runtime.GOMAXPROCS(procs)
					defer runtime.GOMAXPROCS(prev)
					want := append([]float32(nil), c0...)
					NT(m, n, k, a, k, b, k, beta, want, n)
					got := append([]float32(nil), c0...)
					rows := &matrixRows{b: b, n: n, k: k, fail: -1}
					if err := NTRows(m, n, k, a, k, rows, beta, got, n); err != nil {
						t.Fatalf("m %d n %d k %d, %s: %v", m, n, k, kernels, err)
					}
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("m %d n %d k %d beta %v procs %d, %s: c[%d] = %v, NT %v", m, n, k, beta, procs, kernels, i, got[i], want[i])
						}
					}
					// Packed products decode B once a block of rows of A (rowBlockBytes), panels once.
					if rows.decoded < n*k {
						t.Fatalf("m %d n %d k %d, %s: %d values decoded, B has %d", m, n, k, kernels, rows.decoded, n*k)
					}
					// RowsScratchBytes' bound on one goroutine's buffer.
					if most := int64(4 * rows.most); most > max(panelBytes, 16*4*int64(k)) || most > RowsScratchBytes(n, k) {
						t.Fatalf("m %d n %d k %d, %s: a decode of %d bytes, RowsScratchBytes %d", m, n, k, kernels, most, RowsScratchBytes(n, k))
					}
				})
			}
		}
	}
}

// TestNTRowsDecodeError: a decode that fails makes NTRows return its error, wrapped with the rows.
func TestNTRowsDecodeError(t *testing.T) {
	if !DecodesRows(16) {
		testfiles.SkipCPU(t, "no AVX2: NTRows does not run")
	}
	r := rand.New(rand.NewPCG(23, 24))
	for _, s := range [][4]int{{64, 200, 1024, 150}, {2, 10, 64, 9}, {20, 40, 512, 0}} {
		m, n, k := s[0], s[1], s[2]
		rows := &matrixRows{b: values(r, n*k), n: n, k: k, fail: s[3]}
		err := NTRows(m, n, k, values(r, m*k), k, rows, 0, make([]float32, m*n), n)
		if !errors.Is(err, errDecode) {
			t.Fatalf("m %d n %d k %d, row %d failing: %v, want %v", m, n, k, s[3], err, errDecode)
		}
	}
}
