//go:build !amd64

package kernel

// AvailableVNNI is false: PanelDots16x4 is never called.
const AvailableVNNI = false

func PanelDots16x4(w *uint8, a *int8, kp, ng, g8 int, corr *int32, scales, ascale, out *float32) {
	panic("kernel: no PanelDots16x4 on this architecture")
}
