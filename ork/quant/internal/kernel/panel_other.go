//go:build !amd64

package kernel

// AvailableVNNI is false: PanelDots16x4 is never called.
const AvailableVNNI = false

func PanelDots16x4(w *uint8, a *int8, kp, ng, g8 int, corr *int32, scales, ascale, out *float32) {
	panic("kernel: no PanelDots16x4 on this architecture")
}

func PanelDots16x4AVX2(w *int8, a *int16, kp, ng, g8 int, scales, ascale, out *float32) {
	panic("kernel: no PanelDots16x4AVX2 on this architecture")
}

func Widen16(dst *int16, src *int8, n16 int) { panic("kernel: no Widen16 on this architecture") }
