package model

import (
	"math"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// attentionWorkers is the number of heads attention computes at once.
func attentionWorkers(heads int) int { return workersFor(heads) }

// attention computes causal grouped-query attention: out (T rows of heads·hd) from q (same shape) and
// k, v (T rows of kvHeads·hd), with scoreBuf (attentionWorkers(heads)·T·T values) as scratch. Per head:
// S = scale·Q·Kᵀ, a causal softmax of each row (float64 sum, as ggml), O = S·V; heads run in parallel.
func attention(out, scoreBuf, q, k, v []float32, t, heads, kvHeads, hd int) {
	qd, kvd := heads*hd, kvHeads*hd
	group := heads / kvHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	workers := attentionWorkers(heads)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		s := scoreBuf[w*t*t : (w+1)*t*t]
		go func() {
			defer wg.Done()
			for h := range jobs {
				kh := h / group
				qm := blas32.General{Rows: t, Cols: hd, Stride: qd, Data: q[h*hd:]}
				km := blas32.General{Rows: t, Cols: hd, Stride: kvd, Data: k[kh*hd:]}
				sm := blas32.General{Rows: t, Cols: t, Stride: t, Data: s}
				blas32.Gemm(blas.NoTrans, blas.Trans, scale, qm, km, 0, sm)
				causalSoftmax(s, t)
				vm := blas32.General{Rows: t, Cols: hd, Stride: kvd, Data: v[kh*hd:]}
				om := blas32.General{Rows: t, Cols: hd, Stride: qd, Data: out[h*hd:]}
				blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, sm, vm, 0, om)
			}
		}()
	}
	for h := 0; h < heads; h++ {
		jobs <- h
	}
	close(jobs)
	wg.Wait()
}

// causalSoftmax replaces row i of the t×t matrix s by softmax(s[i][0..i]) and zeroes s[i][i+1..].
func causalSoftmax(s []float32, t int) {
	for i := 0; i < t; i++ {
		row := s[i*t : (i+1)*t]
		mx := row[0]
		for _, x := range row[1 : i+1] {
			mx = max(mx, x)
		}
		var sum float64
		for j := 0; j <= i; j++ {
			e := expf(row[j] - mx)
			row[j] = e
			sum += float64(e)
		}
		inv := float32(1 / sum)
		for j := 0; j <= i; j++ {
			row[j] *= inv
		}
		clear(row[i+1:])
	}
}

// expf is exp for float32 arguments in (-inf, 88], accurate to about 1 ulp (Cephes expf: range
// reduction by ln 2 in two parts, a degree-6 polynomial, scaling by 2^n); below -87.3 it returns 0.
func expf(x float32) float32 {
	if x < -87.3 {
		return 0
	}
	n := float32(math.Floor(float64(x*1.44269504088896341 + 0.5)))
	r := x - n*0.693359375 - n*-2.12194440e-4
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	y := p*r*r + r + 1
	return y * math.Float32frombits(uint32(int32(n)+127)<<23)
}
