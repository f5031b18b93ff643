package build

import "orkpipe/ork/pack"

// Estimates for engine.Node.Cost of the nodes at the end of a build, whose order decides how the
// stub's sha256 and the pack's writing share the cores once the weights are done: rough single-core
// nanoseconds per byte of the file each one reads or writes (only how they compare matters). The
// nodes before the pack declare none: what follows each of them is the pack's chain either way.
const (
	costStubPerByte   = 0.2  // emit-stub, per source byte: header copy, data ranges, BLAKE3 of the holes
	costSHA256PerByte = 0.65 // sha256, per byte of its file
	costPackPerByte   = 1.2  // write-orkpack, per pack byte: entries checked, hashed, copied
	costVerifyPerByte = 0.6  // verify-local, per pack byte: every entry checked
)

// cost is perByte·n in nanoseconds.
func cost(perByte float64, n int64) int64 { return int64(perByte * float64(n)) }

// sourceBytes is the data size of the source's tensors (the stub's size, but for its header).
func sourceBytes(src *source) int64 {
	var n int64
	for _, t := range src.tensors {
		n += t.RowBytes() * t.Rows()
	}
	return n
}

// packBytes estimates the pack's size: each weight's codes and float32 group scales at its base
// tier (0 for a dtype ParseDType rejects; the plan has checked them).
func packBytes(ws []*weight) int64 {
	var n int64
	for _, w := range ws {
		dt, err := pack.ParseDType(w.fin.DType)
		if err != nil {
			continue
		}
		rows, kp := int64(w.fin.N), int64(w.fin.KP())
		groups := int64(1)
		if g := int64(w.fin.Group); g > 0 {
			groups = (kp + g - 1) / g
		}
		n += rows*kp*int64(dt.Bits())/8 + rows*groups*4
	}
	return n
}
