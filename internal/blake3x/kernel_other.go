//go:build !amd64

package blake3x

// wideKernel is false off amd64: SubtreeCV uses guts.CompressBuffer (portable Go there).
const wideKernel = false

// wide512 is false off amd64: the one-shot and streaming digests are zeebo/blake3's.
const wide512 = false

func chunks16(out *[16]ChainValue, in *[groupLen]byte, counter uint64) {
	chunks16Generic(out, in, counter)
}

func parents16(out *[16]ChainValue, in *[32]ChainValue) { parents16Generic(out, in) }
