package quant

import (
	"context"
	"encoding/binary"
	"fmt"
	"unsafe"

	"orkpipe/ork/internal/checked"
	"orkpipe/ork/quant/internal/kernel"
)

// panelKind says which panel kernel MatMulInt runs for weights of whole groups.
type panelKind int

const (
	noPanels   panelKind = iota // MatMulInt's group loop over dotInt8
	vnniPanels                  // kernel.PanelDots16x4: AVX-512 VNNI, codes + 128 against signed bytes
	avx2Panels                  // kernel.PanelDots16x4AVX2: AVX2, code pairs widened to int16
)

// useVNNI and useAVX2Panels select the panel kernels where the CPU has them; tests turn them off to
// check the other paths on the same machine.
var (
	useVNNI       = kernel.AvailableVNNI
	useAVX2Panels = kernel.Available
)

// panelPath says which panel kernel takes a weight with whole groups of g values: g a multiple of
// 8 (two VNNI steps of four, four AVX2 steps of two), below the size where a group's int32 sum could
// overflow (Σ (w+128)·a for VNNI, Σ w·a for AVX2).
func panelPath(g int) panelKind {
	switch {
	case g%8 != 0:
		return noPanels
	case useVNNI && g < 65793:
		return vnniPanels
	case useAVX2Panels && g < 131072:
		return avx2Panels
	}
	return noPanels
}

// Panel geometry: a kernel covers 16 weight rows and 4 tokens per call; a worker packs
// panelBlock panels at once and runs every token through them, so a block's bytes (64 rows x KP)
// stay in cache while the tokens stream by.
const (
	panelRows  = 16
	panelToks  = 4
	panelBlock = 4
)

// matMulIntPanels is MatMulInt where every group is whole and a multiple of 8 values, by the panel
// kernel kind: weight rows are repacked sixteen at a time so that the kernel's lanes are rows (no
// horizontal sums), and the float32 accumulation is the group loop's, per (token, row), in the
// same order — the result is bit-identical to MatMulInt's loop (integer sums are exact).
func matMulIntPanels(ctx context.Context, kind panelKind, a *Activations, w *Weight, out []float32, workers, g int) error {
	return panelProduct(ctx, kind, a, w, nil, w.N, w.KP, w.Groups(), out, workers, g)
}

// panelProduct is the product of a and a weight of n rows by the panel kernel kind: the weight's
// panels packed from w as they are reached, or, w nil, read from pre (PackPanels).
func panelProduct(ctx context.Context, kind panelKind, a *Activations, w *Weight, pre *Panels, n, kp, ng int, out []float32, workers, g int) error {
	if a.M == 0 {
		return ctx.Err()
	}
	// The kernels read four tokens' codes and scales unchecked: panic here rather than read past them.
	_, _ = a.Codes[a.M*kp-1], a.Scales[a.M-1]
	var corr []int32
	if kind == vnniPanels {
		var err error
		if corr, err = panelCorrections(ctx, a, ng, g, workers); err != nil {
			return err
		}
	}
	panels := (n + panelRows - 1) / panelRows
	return forRows(ctx, panels, workers, func(lo, hi int) {
		var pack []byte
		var scales []float32
		if pre == nil {
			pack = make([]byte, panelBlock*panelRows*kp)
			scales = make([]float32, panelBlock*panelRows*ng)
		}
		var res [panelToks * panelRows]float32
		var tail []int8  // VNNI: the last tokens, zero-padded to panelToks rows
		var wide []int16 // AVX2: four tokens' codes as int16, zero-padded to panelToks rows
		if kind == avx2Panels {
			wide = make([]int16, panelToks*kp)
		}
		var tailScale [panelToks]float32
		for p0 := lo; p0 < hi; p0 += panelBlock {
			np := min(panelBlock, hi-p0)
			pk, sk := pack, scales
			if pre == nil {
				for p := range np {
					packOne(kind, w, p0+p, pack[p*panelRows*kp:(p+1)*panelRows*kp], scales[p*panelRows*ng:(p+1)*panelRows*ng])
				}
			} else {
				pk, sk = pre.codes[p0*panelRows*kp:(p0+np)*panelRows*kp], pre.scales[p0*panelRows*ng:(p0+np)*panelRows*ng]
			}
			for t0 := 0; t0 < a.M; t0 += panelToks {
				if ctx.Err() != nil {
					return
				}
				codes, as := a.Codes[t0*kp:], a.Scales[t0:]
				nt := min(panelToks, a.M-t0)
				if nt < panelToks {
					tailScale = [panelToks]float32{}
					copy(tailScale[:], a.Scales[t0:])
					as = tailScale[:]
					if kind == vnniPanels {
						if tail == nil {
							tail = make([]int8, panelToks*kp)
						}
						clear(tail)
						copy(tail, a.Codes[t0*kp:])
						codes = tail
					}
				}
				if kind == avx2Panels {
					widen(wide, codes[:nt*kp])
					clear(wide[nt*kp:])
				}
				for p := range np {
					pw, ps := &pk[p*panelRows*kp], &sk[p*panelRows*ng]
					if kind == vnniPanels {
						kernel.PanelDots16x4(pw, &codes[0], kp, ng, g/8, &corr[t0*ng], ps, &as[0], &res[0])
					} else {
						kernel.PanelDots16x4AVX2((*int8)(unsafe.Pointer(pw)), &wide[0], kp, ng, g/8, ps, &as[0], &res[0])
					}
					n0 := (p0 + p) * panelRows
					nr := min(panelRows, n-n0)
					for t := range nt {
						copy(out[(t0+t)*n+n0:(t0+t)*n+n0+nr], res[t*panelRows:t*panelRows+nr])
					}
				}
			}
		}
	})
}

// panelCorrections returns, for the VNNI kernel, corr[t][gi] = 128·Σ of token t's codes over group
// gi, for the tokens rounded up to a whole panelToks (the padding tokens' rows 0).
func panelCorrections(ctx context.Context, a *Activations, ng, g, workers int) ([]int32, error) {
	kp := ng * g
	m4 := (a.M + panelToks - 1) / panelToks * panelToks
	corr := make([]int32, m4*ng)
	err := forRows(ctx, a.M, workers, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			row := a.Codes[t*kp : (t+1)*kp]
			for gi := range ng {
				var s int32
				for _, c := range row[gi*g : (gi+1)*g] {
					s += int32(c)
				}
				corr[t*ng+gi] = 128 * s
			}
		}
	})
	return corr, err
}

// widen sets dst[i] = int16(src[i]) for every value of src (dst at least as long): sixteen at a
// time by kernel.Widen16, the rest here.
func widen(dst []int16, src []int8) {
	n16 := len(src) / 16
	if n16 > 0 {
		_ = dst[len(src)-1] // the kernel writes 16·n16 values: panic here rather than write past dst
		kernel.Widen16(&dst[0], &src[0], n16)
	}
	for i := n16 * 16; i < len(src); i++ {
		dst[i] = int16(src[i])
	}
}

// packOne packs panel p of w (rows 16p..16p+15) for the kernel kind into dst and scales.
func packOne(kind panelKind, w *Weight, p int, dst []byte, scales []float32) {
	if kind == vnniPanels {
		packPanel(w, p*panelRows, dst, scales)
	} else {
		packPanelPairs(w, p*panelRows, dst, scales)
	}
}

// Panels is a weight's codes and scales laid out once as MatMulInt's panel kernels read them, for a
// weight that multiplies many batches of activations (an emulated weight's forward passes, which
// MatMulInt would repack for every batch). Its memory is Bytes: the codes one byte each and the
// scales, the rows rounded up to a whole panel of 16.
type Panels struct {
	N, KP, Group int // the weight's
	kind         panelKind
	g, ng        int       // the effective group and the groups a row
	codes        []byte    // panel after panel, each as packPanel (VNNI) or packPanelPairs (AVX2) lays it out
	scales       []float32 // each panel's scales, [group][row]
}

// PackPanels returns w's panels for MatMulIntPacked, packed on up to workers goroutines, or nil when
// MatMulInt does not take w to a panel kernel (groups not whole multiples of 8 values, or no kernel
// on this CPU): multiply such a weight with MatMulInt.
func PackPanels(ctx context.Context, w *Weight, workers int) (*Panels, error) {
	g, ng, kp := effGroup(w.KP, w.Group), w.Groups(), w.KP
	if ng*g != kp || kp == 0 {
		return nil, nil
	}
	kind := panelPath(g)
	if kind == noPanels {
		return nil, nil
	}
	panels := (w.N + panelRows - 1) / panelRows
	p := &Panels{N: w.N, KP: kp, Group: w.Group, kind: kind, g: g, ng: ng,
		codes: make([]byte, panels*panelRows*kp), scales: make([]float32, panels*panelRows*ng)}
	err := forRows(ctx, panels, workers, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			packOne(kind, w, i, p.codes[i*panelRows*kp:(i+1)*panelRows*kp], p.scales[i*panelRows*ng:(i+1)*panelRows*ng])
		}
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// PanelBytes is the memory PackPanels takes for a weight of n rows of kp codes in groups of group
// values (0: per row), whether or not it packs it.
func PanelBytes(n, kp, group int) int64 {
	rows := int64(n+panelRows-1) / panelRows * panelRows
	ng := int64(1)
	if group > 0 {
		ng = (int64(kp) + int64(group) - 1) / int64(group)
	}
	return rows*int64(kp) + 4*rows*ng
}

// ProductScratchBytes is the most scratch QuantizeActivationsOn of m rows of kp values and the product
// of those activations by a weight of n rows of kp values in groups of group values (0: per row) —
// MatMulIntPacked on the panels PackPanels makes of the weight, or MatMulInt where it makes none —,
// each on workers goroutines (at least one), allocate on top of the Activations and the product:
// QuantizeActivationsOn's float64 copy of a row (8·kp bytes) on each chunk of rows its goroutines
// take (forRows: about four a goroutine of workers, at most m, for m·kp >= 65536 values; one below),
// and for a panel kernel on each chunk of panels of 16 rows the goroutines multiplying take (forRows
// again, on workers) four tokens' codes widened to int16 (AVX2: 8·kp) or zero-padded (VNNI: 4·kp), and
// VNNI's group-sum corrections (an int32 a group a token, the tokens rounded up to four). Every chunk's
// buffers are counted: those of the chunks done are garbage, not yet collected, while the next run;
// so are the two phases summed. It does not depend on GOMAXPROCS. ok is false when the sum
// overflows int64.
func ProductScratchBytes(m, kp, n, group, workers int) (bytes int64, ok bool) {
	if m < 1 || kp < 1 || n < 1 {
		return 0, true
	}
	quantizers := int64(1)
	if vals, ok := checked.Mul(int64(m), int64(kp)); !ok || vals >= 1<<16 {
		quantizers = int64(forRowsCalls(m, workers))
	}
	s := scratchSum{ok: true}
	s.add(quantizers, 8, int64(kp))
	g := effGroup(kp, group)
	if ng := (kp + g - 1) / g; ng*g == kp {
		w := int64(forRowsCalls((n+panelRows-1)/panelRows, workers))
		switch panelPath(g) {
		case avx2Panels:
			s.add(w, 2*panelToks, int64(kp))
		case vnniPanels:
			s.add(w, panelToks, int64(kp))
			s.add(4*panelToks, (int64(m)+panelToks-1)/panelToks, int64(ng))
		}
	}
	return s.n, s.ok
}

// scratchSum adds products of sizes, noting an overflow.
type scratchSum struct {
	n  int64
	ok bool
}

// add adds the product of a, b and c.
func (s *scratchSum) add(a, b, c int64) {
	ab, ok1 := checked.Mul(a, b)
	abc, ok2 := checked.Mul(ab, c)
	n, ok3 := checked.Add(s.n, abc)
	s.n, s.ok = n, s.ok && ok1 && ok2 && ok3
}

// Bytes is the memory the panels hold.
func (p *Panels) Bytes() int64 { return int64(len(p.codes)) + 4*int64(len(p.scales)) }

// MatMulIntPacked is MatMulInt of a and the weight p was packed from: the same values, bit for bit.
func MatMulIntPacked(ctx context.Context, a *Activations, p *Panels, out []float32, workers int) error {
	if a.K != p.KP {
		return fmt.Errorf("matmul: activations have K=%d, weight stores KP=%d: %w", a.K, p.KP, ErrShape)
	}
	if len(out) != a.M*p.N {
		return fmt.Errorf("matmul: out has %d values, want M*N = %d: %w", len(out), a.M*p.N, ErrShape)
	}
	return panelProduct(ctx, p.kind, a, nil, p, p.N, p.KP, p.ng, out, workers, p.g)
}

// packPanel writes the panel of rows n0..n0+15 of w as kernel.PanelDots16x4 reads it: for each
// run of four columns, the sixteen rows' four codes as code+128; rows past w.N are code 0 with
// scale 0. scales gets the rows' group scales as [group][row]. The output is written in order
// (sixteen row streams read side by side).
func packPanel(w *Weight, n0 int, dst []byte, scales []float32) {
	kp := w.KP
	rows := panelSource(w, n0, scales)
	dst = dst[:kp*panelRows]
	for k := 0; k < kp; k += 4 {
		d := dst[k*panelRows : k*panelRows+4*panelRows]
		for r := range rows {
			binary.LittleEndian.PutUint32(d[4*r:], binary.LittleEndian.Uint32(rows[r][k:])^0x80808080)
		}
	}
}

// packPanelPairs writes the panel of rows n0..n0+15 of w as kernel.PanelDots16x4AVX2 reads it: for
// each pair of columns, the sixteen rows' two codes (int8, as stored); rows past w.N are code 0
// with scale 0. scales gets the rows' group scales as [group][row], as packPanel's.
func packPanelPairs(w *Weight, n0 int, dst []byte, scales []float32) {
	kp := w.KP
	rows := panelSource(w, n0, scales)
	dst = dst[:kp*panelRows]
	for k := 0; k < kp; k += 2 {
		d := dst[k*panelRows : k*panelRows+2*panelRows]
		for r := range rows {
			binary.LittleEndian.PutUint16(d[2*r:], binary.LittleEndian.Uint16(rows[r][k:]))
		}
	}
}

// panelSource returns the codes of rows n0..n0+15 of w as bytes (rows past w.N all code 0) and sets
// scales to their group scales as [group][row] (0 past w.N).
func panelSource(w *Weight, n0 int, scales []float32) [panelRows][]byte {
	ng, kp := w.Groups(), w.KP
	var rows [panelRows][]byte
	for r := range rows {
		if n := n0 + r; n < w.N {
			rows[r] = int8Bytes(w.Codes[n*kp : (n+1)*kp])
			for gi := range ng {
				scales[gi*panelRows+r] = w.Scales[n*ng+gi]
			}
		} else {
			rows[r] = make([]byte, kp) // code 0
			for gi := range ng {
				scales[gi*panelRows+r] = 0
			}
		}
	}
	return rows
}

// int8Bytes views int8 codes as their bytes (two's complement), without copying.
func int8Bytes(c []int8) []byte {
	if len(c) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&c[0])), len(c))
}
