//go:build !amd64

package fma

// available is false off amd64: Lanes8 runs in Go.
var available = false

func lanes8(w, x *float32, n int, acc *[8]float32) {
	panic("fma: no kernel off amd64")
}

func lanes32(w, x *float32, n int, acc *[4][8]float32) {
	panic("fma: no kernel off amd64")
}

func q8Lanes(wq, xq *int8, wd, xd *float32, n int, acc *[8]float32) {
	panic("fma: no kernel off amd64")
}
