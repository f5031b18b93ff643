//go:build !amd64

package fma

// available is false off amd64: Lanes8 runs in Go.
var available = false

// available16 is false off amd64: the binary16 roundings run in Go.
var available16 = false

func lanes8(w, x *float32, n int, acc *[8]float32) {
	panic("fma: no kernel off amd64")
}

func lanes32(w, x *float32, n int, acc *[4][8]float32) {
	panic("fma: no kernel off amd64")
}

func q8Lanes(wq, xq *int8, wd, xd *float32, n int, acc *[8]float32) {
	panic("fma: no kernel off amd64")
}

func axpyRows(acc, v *float32, w, stride int, p *float32, n int) {
	panic("fma: no kernel off amd64")
}

func round16(x *float32, n int) {
	panic("fma: no kernel off amd64")
}

func axpyRound16(acc, v *float32, n int, p float32) {
	panic("fma: no kernel off amd64")
}

func scaleRound16(x *float32, n int, s float32) {
	panic("fma: no kernel off amd64")
}

func silu(y, x, gate *float32, n int) {
	panic("fma: no kernel off amd64")
}

func scale(x *float32, n int, s float32) {
	panic("fma: no kernel off amd64")
}

func q8Lanes4(wq *int8, wd *float32, x0, x1, x2, x3 *int16, d0, d1, d2, d3 *float32, n int, acc *[4][8]float32) {
	panic("fma: no kernel off amd64")
}

func dot8(w, x *float32, n int) float32 {
	panic("fma: no kernel off amd64")
}
