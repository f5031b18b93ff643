package quant

import (
	"math"

	"orkpipe/ork/quant/internal/kernel"
)

// gramTileRows is the rows one call of the AVX-512 Gram kernel covers (kernel.GramTile16); the AVX2
// kernel covers half. A refit block's codes are stored for a multiple of it (gramRows), the rows
// past the block's ignored.
const gramTileRows = 16

// gramRows is nb rounded up to a multiple of gramTileRows.
func gramRows(nb int) int { return (nb + gramTileRows - 1) / gramTileRows * gramTileRows }

// gram512 and gram256 say whether gramTile may run kernel.GramTile16 and kernel.GramTile8 (the
// tests turn them off to compare with gramTileGo).
var (
	gram512 = kernel.Available512 && kernel.AvailableFMA
	gram256 = kernel.AvailableFMA
)

// gramProducts sets, for the nb rows whose codes sc.c holds (by columns, sc.cs rows a column), each
// row's Gram matrix AᵀHA (sc.gram, packed), H from hb: entry (h', h), h' <= h, of row r is
// c_{r,h}ᵀ·H[h, h']·c_{r,h'}, c_{r,h} the row's codes of group h, H[h, h'] the g x g block of H's
// rows of group h and columns of group h' (strictly below the diagonal for h' < h, where the buffer
// holds H; assembled into sc.d, zero-padded to g x g, for h' = h). gramTile forms a block pair's
// entries for all the rows with the block in the L1 cache: K² flops a row, no intermediate product
// written to memory. The row groups go gramRowGroups at a time, each column group's codes serving
// all of them while in the cache: per block of rows H is read once, and each column group's codes
// once per gramRowGroups row groups instead of once per row group.
func gramProducts(hb hessBuffer, sc *refitScratch, nb, ng, g int) {
	kp, a, cs := hb.kp, hb.a, sc.cs
	rows := gramRows(nb)
	sp := symPacked(ng)
	for h0 := 0; h0 < ng; h0 += gramRowGroups {
		h1 := min(h0+gramRowGroups, ng)
		for hp := 0; hp < h1; hp++ {
			cj := sc.c[hp*g*cs:]
			for h := max(h0, hp); h < h1; h++ {
				a0 := h * g
				gh := min(g, kp-a0)
				blk, hs := a[a0*kp+hp*g:], kp
				if hp == h {
					blk, hs = sc.d, g
					diagBlock(hb, sc.d, a0, gh, g)
				}
				gramTile(blk, hs, gh, g, sc.c[a0*cs:], cj, cs, rows, sc.out)
				at := h*(h+1)/2 + hp
				for r := 0; r < nb; r++ {
					sc.gram[r*sp+at] = sc.out[r]
				}
			}
		}
	}
}

// gramRowGroups is the row groups of H whose block pairs gramProducts forms together.
const gramRowGroups = 8

// diagBlock sets d (g x g) to H's diagonal block of the gh rows and columns from a0 (H's diagonal
// from hb.diag, the rest from below the buffer's diagonal), zero past gh.
func diagBlock(hb hessBuffer, d []float64, a0, gh, g int) {
	kp, a := hb.kp, hb.a
	if gh < g {
		clear(d)
	}
	for i := 0; i < gh; i++ {
		for j := 0; j < gh; j++ {
			switch {
			case i == j:
				d[i*g+j] = hb.diag[a0+i]
			case i > j:
				d[i*g+j] = a[(a0+i)*kp+a0+j]
			default:
				d[i*g+j] = a[(a0+j)*kp+a0+i]
			}
		}
	}
}

// gramTile sets out[r], for r < rows (a multiple of gramTileRows), to
// Σ_{j < g} (Σ_{i < gi} ci[i·cs + r]·h[i·hs + j])·cj[j·cs + r]: one block pair's Gram entry of each
// row, with gramTileGo's arithmetic (on AVX-512 or AVX2 with FMA3 in its kernels, the same bits).
func gramTile(h []float64, hs, gi, g int, ci, cj []float64, cs, rows int, out []float64) {
	// the last values each side reads, so that a short slice panics here rather than in a kernel
	_, _, _ = h[(gi-1)*hs+g-1], ci[(gi-1)*cs+rows-1], cj[(g-1)*cs+rows-1]
	_ = out[rows-1]
	switch {
	case gram512 && g%8 == 0:
		for r := 0; r < rows; r += 16 {
			kernel.GramTile16(&h[0], hs, gi, g, &ci[r], &cj[r], cs, &out[r])
		}
	case gram256 && g%4 == 0:
		for r := 0; r < rows; r += 8 {
			kernel.GramTile8(&h[0], hs, gi, g, &ci[r], &cj[r], cs, &out[r])
		}
	default:
		gramTileGo(h, hs, gi, g, ci, cj, cs, rows, out)
	}
}

// gramTileGo is gramTile's reference: for each row, column j's product with the row's codes of
// group h is a chain of fused multiply-adds over i in order from +0, and the entry a chain of fused
// multiply-adds of those products with the row's codes of group h' over j in order from +0. A row's
// arithmetic involves no other row, so the kernels, which hold a row in each lane, match it bit for
// bit whatever their width.
func gramTileGo(h []float64, hs, gi, g int, ci, cj []float64, cs, rows int, out []float64) {
	for r := 0; r < rows; r++ {
		s := 0.0
		for j := 0; j < g; j++ {
			acc := 0.0
			for i := 0; i < gi; i++ {
				acc = math.FMA(ci[i*cs+r], h[i*hs+j], acc)
			}
			s = math.FMA(acc, cj[j*cs+r], s)
		}
		out[r] = s
	}
}

// mulTile adds, for r < rows (a multiple of gramTileRows) and j < g, Σ_{i < gi} ci[i·cs + r]·h[i·hs + j]
// to y[j·cs + r]: one block's product with each row, with mulTileGo's arithmetic (on AVX-512 or AVX2
// with FMA3 in kernel.MulTile16 / MulTile8, the same bits).
func mulTile(h []float64, hs, gi, g int, ci, y []float64, cs, rows int) {
	_, _, _ = h[(gi-1)*hs+g-1], ci[(gi-1)*cs+rows-1], y[(g-1)*cs+rows-1]
	switch {
	case gram512 && g%8 == 0:
		for r := 0; r < rows; r += 16 {
			kernel.MulTile16(&h[0], hs, gi, g, &ci[r], &y[r], cs)
		}
	case gram256 && g%4 == 0:
		for r := 0; r < rows; r += 8 {
			kernel.MulTile8(&h[0], hs, gi, g, &ci[r], &y[r], cs)
		}
	default:
		mulTileGo(h, hs, gi, g, ci, y, cs, rows)
	}
}

// mulTileGo is mulTile's reference: each output continues from the value y holds as a chain of fused
// multiply-adds over i in order. Rows never meet, so the kernels match it bit for bit.
func mulTileGo(h []float64, hs, gi, g int, ci, y []float64, cs, rows int) {
	for r := 0; r < rows; r++ {
		for j := 0; j < g; j++ {
			acc := y[j*cs+r]
			for i := 0; i < gi; i++ {
				acc = math.FMA(ci[i*cs+r], h[i*hs+j], acc)
			}
			y[j*cs+r] = acc
		}
	}
}

// symTile is the width of the blocks symProducts takes H in, symRowGroups the row groups of blocks
// it takes together.
const (
	symTile      = 32
	symRowGroups = 8
)

// symScratch is one worker's buffers for symProducts on blocks of at most cs rows of kp values.
type symScratch struct {
	cs    int
	t, y  []float64 // the rows' values and products by columns (value k of row r at [k·cs + r]), zero past kp
	bt, d []float64 // one transposed block of H, one diagonal block
}

func newSymScratch(kp, cs int) *symScratch {
	kpp := (kp + symTile - 1) / symTile * symTile
	return &symScratch{cs: cs, t: make([]float64, kpp*cs), y: make([]float64, kpp*cs),
		bt: make([]float64, symTile*symTile), d: make([]float64, symTile*symTile)}
}

// symScratchBytes is the size of a symScratch.
func symScratchBytes(kp, cs int64) int64 {
	kpp := (kp + symTile - 1) / symTile * symTile
	return 8 * (2*kpp*cs + 2*symTile*symTile)
}

// symProducts adds H·t_r to sc.y for the rows r < rows (a multiple of gramTileRows) whose values
// sc.t holds, H the symmetric matrix hb keeps (its strict lower triangle below the buffer's diagonal,
// its diagonal in hb.diag), by 32 x 32 blocks: each block B = H[I, J] below the diagonal serves both
// halves, y_J += Bᵀ·t_I and y_I += B·t_J (B transposed into sc.bt), the diagonal blocks assembled;
// 2·K² flops a row. The row groups go symRowGroups at a time, as gramProducts' go gramRowGroups. Every output's sum
// runs in this loop order, whichever path mulTile takes.
func symProducts(hb hessBuffer, sc *symScratch, rows int) {
	kp, a, cs := hb.kp, hb.a, sc.cs
	ng := (kp + symTile - 1) / symTile
	const T = symTile
	for i0 := 0; i0 < ng; i0 += symRowGroups {
		i1 := min(i0+symRowGroups, ng)
		for J := 0; J < i1; J++ {
			tJ, yJ := sc.t[J*T*cs:], sc.y[J*T*cs:]
			for I := max(i0, J); I < i1; I++ {
				a0 := I * T
				gi := min(T, kp-a0)
				tI, yI := sc.t[a0*cs:], sc.y[a0*cs:]
				if I == J {
					diagBlock(hb, sc.d, a0, gi, T)
					mulTile(sc.d, T, gi, T, tI, yI, cs, rows)
					continue
				}
				blk := a[a0*kp+J*T:]
				mulTile(blk, kp, gi, T, tI, yJ, cs, rows)
				if gi < T {
					clear(sc.bt)
				}
				for i := 0; i < gi; i++ {
					for j, v := range blk[i*kp : i*kp+T] {
						sc.bt[j*T+i] = v
					}
				}
				mulTile(sc.bt, T, T, T, tJ, yI, cs, rows)
			}
		}
	}
}
