package build

import (
	"slices"

	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
	"orkpipe/stages"
)

// Estimates for engine.Node.Cost of the nodes at the end of a build, whose order decides how the
// stub's sha256 and the pack's writing share the cores once the weights are done: single-core
// nanoseconds per byte of the file each one reads or writes on the reference host, on every host
// (their reads, writes and hashes are not among the kinds of work hostspeed measures; workcost.go has
// the other stages' costs).
const (
	costStubPerByte   = 0.2  // emit-stub, per source byte: header copy, data ranges, BLAKE3 of the holes
	costSHA256PerByte = 0.65 // sha256, per byte of its file
	costPackPerByte   = 1.2  // write-orkpack, per pack byte: entries checked, hashed, copied
	costVerifyPerByte = 0.6  // verify-local, per pack byte: every entry checked
)

// cost is perByte·n in nanoseconds.
func cost(perByte float64, n int64) int64 { return nanos(perByte * float64(n)) }

// sourceBytes is the data size of the source's tensors (the stub's size, but for its header).
func sourceBytes(src *source) int64 { return tensorBytes(src.tensors) }

// tensorBytes is the data size of tensors.
func tensorBytes(ts []gguf.TensorInfo) int64 {
	var n int64
	for _, t := range ts {
		n += t.RowBytes() * t.Rows()
	}
	return n
}

// stubBytes is what the stub takes on disk: the blocks (fsBlock) of the source's header and of the
// data of every tensor but the owned ones (sorted names), which stay holes — each tensor's range running
// to the next tensor's start, as emit-stub copies it.
func stubBytes(src *source, owned []string) int64 {
	isOwned := func(name string) bool { _, found := slices.BinarySearch(owned, name); return found }
	blocks := (src.dataOffset + fsBlock - 1) / fsBlock // the header's
	last := blocks                                     // blocks before last are counted
	for i, t := range src.tensors {
		if isOwned(t.Name) {
			continue
		}
		start, end := src.dataOffset+int64(t.Offset), src.size
		if i+1 < len(src.tensors) {
			end = src.dataOffset + int64(src.tensors[i+1].Offset)
		}
		b0, b1 := max(start/fsBlock, last), (end+fsBlock-1)/fsBlock
		if b1 > b0 {
			blocks += b1 - b0
			last = b1
		}
	}
	return blocks * fsBlock
}

// fsBlock is the filesystem block stubBytes counts in (ext4's, XFS's and btrfs's 4 KiB).
const fsBlock = 4096

// promoteBytes is the most that promotions may add to the pack.
func promoteBytes(wp stages.WritePackParams) int64 {
	if wp.Promote == nil {
		return 0
	}
	return wp.Promote.BudgetBytes
}

// packBytes estimates the pack's size: its header page, each weight at its base tier as the pack
// lays it out (codes tiled, scales page-padded: FinalizeParams.PackBytes) and its index (indexBytes
// an entry, a bound).
func packBytes(ws []*weight) int64 {
	n := int64(pack.PageSize)
	for _, w := range ws {
		n += w.fin.PackBytes() + indexBytes
	}
	return n
}

// indexBytes bounds one entry's share of a pack's index and footer.
const indexBytes = 512
