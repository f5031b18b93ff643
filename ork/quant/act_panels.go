package quant

import (
	"context"
	"encoding/binary"
	"unsafe"

	"orkpipe/ork/quant/internal/kernel"
)

// useVNNI selects the VNNI panel path of MatMulInt where the CPU has it; tests turn it off to
// check the AVX2 path on the same machine.
var useVNNI = kernel.AvailableVNNI

// panelPath reports whether matMulIntPanels can take a weight with whole groups of g values: g a
// multiple of 8 (two VNNI steps of four), below the size where Σ (w+128)·a could leave int32.
func panelPath(g int) bool { return useVNNI && g%8 == 0 && g < 65793 }

// Panel geometry: kernel.PanelDots16x4 covers 16 weight rows and 4 tokens per call; a worker packs
// panelBlock panels at once and runs every token through them, so a block's bytes (64 rows x KP)
// stay in cache while the tokens stream by.
const (
	panelRows  = 16
	panelToks  = 4
	panelBlock = 4
)

// matMulIntPanels is MatMulInt where every group is whole and a multiple of 8 values, on CPUs with
// AVX-512 VNNI: weight rows are repacked sixteen at a time so that the kernel's lanes are rows
// (no horizontal sums), and the float32 accumulation is the group loop's, per (token, row), in the
// same order — the result is bit-identical to MatMulInt's loop (integer sums are exact).
func matMulIntPanels(ctx context.Context, a *Activations, w *Weight, out []float32, workers, g int) error {
	ng, kp := w.Groups(), w.KP
	if a.M == 0 {
		return ctx.Err()
	}
	// The kernel reads four tokens' codes and scales unchecked: panic here rather than read past them.
	_, _ = a.Codes[a.M*kp-1], a.Scales[a.M-1]
	m4 := (a.M + panelToks - 1) / panelToks * panelToks
	// corr[t][gi] = 128·Σ of token t's codes over group gi; rows of the padding tokens stay 0.
	corr := make([]int32, m4*ng)
	if err := forRows(ctx, a.M, workers, func(lo, hi int) {
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
	}); err != nil {
		return err
	}
	panels := (w.N + panelRows - 1) / panelRows
	return forRows(ctx, panels, workers, func(lo, hi int) {
		pack := make([]byte, panelBlock*panelRows*kp)
		scales := make([]float32, panelBlock*panelRows*ng)
		var res [panelToks * panelRows]float32
		var tail []int8 // the last tokens, zero-padded to panelToks rows
		var tailScale [panelToks]float32
		for p0 := lo; p0 < hi; p0 += panelBlock {
			np := min(panelBlock, hi-p0)
			for p := range np {
				packPanel(w, (p0+p)*panelRows, pack[p*panelRows*kp:(p+1)*panelRows*kp], scales[p*panelRows*ng:(p+1)*panelRows*ng])
			}
			for t0 := 0; t0 < a.M; t0 += panelToks {
				if ctx.Err() != nil {
					return
				}
				codes, as := a.Codes[t0*kp:], a.Scales[t0:]
				nt := min(panelToks, a.M-t0)
				if nt < panelToks {
					if tail == nil {
						tail = make([]int8, panelToks*kp)
					}
					clear(tail)
					copy(tail, a.Codes[t0*kp:])
					tailScale = [panelToks]float32{}
					copy(tailScale[:], a.Scales[t0:])
					codes, as = tail, tailScale[:]
				}
				for p := range np {
					kernel.PanelDots16x4(&pack[p*panelRows*kp], &codes[0], kp, ng, g/8, &corr[t0*ng], &scales[p*panelRows*ng], &as[0], &res[0])
					n0 := (p0 + p) * panelRows
					nr := min(panelRows, w.N-n0)
					for t := range nt {
						copy(out[(t0+t)*w.N+n0:(t0+t)*w.N+n0+nr], res[t*panelRows:t*panelRows+nr])
					}
				}
			}
		}
	})
}

// packPanel writes the panel of rows n0..n0+15 of w as kernel.PanelDots16x4 reads it: for each
// run of four columns, the sixteen rows' four codes as code+128; rows past w.N are code 0 with
// scale 0. scales gets the rows' group scales as [group][row]. The output is written in order
// (sixteen row streams read side by side).
func packPanel(w *Weight, n0 int, dst []byte, scales []float32) {
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
	dst = dst[:kp*panelRows]
	for k := 0; k < kp; k += 4 {
		d := dst[k*panelRows : k*panelRows+4*panelRows]
		for r := range rows {
			binary.LittleEndian.PutUint32(d[4*r:], binary.LittleEndian.Uint32(rows[r][k:])^0x80808080)
		}
	}
}

// int8Bytes views int8 codes as their bytes (two's complement), without copying.
func int8Bytes(c []int8) []byte {
	if len(c) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&c[0])), len(c))
}
