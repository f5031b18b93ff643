package fma

// Lanes8 adds to each lane j of acc the products w[8l+j]·x[8l+j] for l = 0, 1, ... in order, each
// with one rounding (acc[j] = F32(w[8l+j], x[8l+j], acc[j])): an 8-lane FMA accumulator as ggml's
// AVX2 code keeps one. len(w) must be a multiple of 8 and len(x) at least len(w). With AVX2 and FMA
// it runs in a kernel (VFMADD231PS, the same bits as F32).
func Lanes8(w, x []float32, acc *[8]float32) {
	if len(w)%8 != 0 || len(x) < len(w) {
		panic("fma: Lanes8 wants len(w) a multiple of 8 and len(x) >= len(w)")
	}
	if len(w) == 0 {
		return
	}
	if available {
		lanes8(&w[0], &x[0], len(w), acc)
		return
	}
	lanes8Go(w, x, acc)
}

// lanes8Go is Lanes8 in Go.
func lanes8Go(w, x []float32, acc *[8]float32) {
	for l := 0; l < len(w); l += 8 {
		for j := range acc {
			acc[j] = F32(w[l+j], x[l+j], acc[j])
		}
	}
}

// Lanes32 is Lanes8 for four 8-lane accumulators over blocks of 32 values: acc[j][l] takes the
// products w[32i+8j+l]·x[32i+8j+l] for i = 0, 1, ... in order (ggml_vec_dot_f32's and _f16's four
// accumulators). len(w) must be a multiple of 32 and len(x) at least len(w).
func Lanes32(w, x []float32, acc *[4][8]float32) {
	if len(w)%32 != 0 || len(x) < len(w) {
		panic("fma: Lanes32 wants len(w) a multiple of 32 and len(x) >= len(w)")
	}
	if len(w) == 0 {
		return
	}
	if available {
		lanes32(&w[0], &x[0], len(w), acc)
		return
	}
	lanes32Go(w, x, acc)
}

// lanes32Go is Lanes32 in Go.
func lanes32Go(w, x []float32, acc *[4][8]float32) {
	for i := 0; i < len(w); i += 32 {
		for j := range acc {
			for l := range acc[j] {
				acc[j][l] = F32(w[i+8*j+l], x[i+8*j+l], acc[j][l])
			}
		}
	}
}
