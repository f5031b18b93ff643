//go:build !amd64

package deltanet

// Available is false off amd64: Step has no kernel there.
var Available = false

var wide = false

func step16(st *float32, hd int, k, q, v *float32, decay, beta, scale float32, out *float32) {
	panic("deltanet: no kernel off amd64")
}

func step8(st *float32, hd int, k, q, v *float32, decay, beta, scale float32, out *float32) {
	panic("deltanet: no kernel off amd64")
}
