package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"orkpipe/ork/gguf"
	"orkpipe/ork/model/internal/fma"
)

// ggmlMatmul is a Linear computing y = W·x as ggml's CPU backend computes ggml_mul_mat (and, with vec,
// ggml_mul_mat_id) for a weight of type Q8_0, F16 or F32, bit for bit: the input row is converted to the
// weight's vec_dot_type (Q8_0 blocks by quantize_row_q8_0's AVX2 variant, binary16, or kept float32),
// and every output is one dot product in ggml's order — dotQ8_0 (four tokens at a time: dotsQ8_0),
// dotTiny for llamafile's sgemm (which ggml_mul_mat uses for F16/F32 weights of N a multiple of 4 and K
// a multiple of 8), else dotVecF16 / dotVecF32 (ggml_vec_dot_*, used by ggml_mul_mat_id always).
type ggmlMatmul struct {
	n, k int
	typ  gguf.Type
	q8   q8Row     // Q8_0: n·k codes and n·k/32 scales
	w    []float32 // F16 (exact values) and F32: n·k values
	vec  bool      // the ggml_vec_dot_* path
}

// ggmlExactType reports whether newGGMLMatmul implements weights of type t.
func ggmlExactType(t gguf.Type) bool {
	return t == gguf.TypeQ8_0 || t == gguf.TypeF16 || t == gguf.TypeF32
}

// newGGMLMatmul decodes raw (n rows of k values of type t, as stored in GGUF) into a ggmlMatmul. mulMatID
// selects ggml_mul_mat_id's dot products (expert slices).
func newGGMLMatmul(t gguf.Type, n, k int, raw []byte, mulMatID bool) (*ggmlMatmul, error) {
	m := &ggmlMatmul{n: n, k: k, typ: t}
	switch t {
	case gguf.TypeQ8_0:
		if k%32 != 0 || len(raw) != n*k/32*34 {
			return nil, fmt.Errorf("ggml matmul %dx%d Q8_0: %d bytes: %w", n, k, len(raw), ErrBadModel)
		}
		m.q8 = q8Row{q: make([]int8, n*k), d: make([]float32, n*k/32)}
		for b := range m.q8.d {
			blk := raw[b*34 : (b+1)*34]
			m.q8.d[b] = gguf.F16ToF32(binary.LittleEndian.Uint16(blk))
			for i, c := range blk[2:] {
				m.q8.q[b*32+i] = int8(c)
			}
		}
	case gguf.TypeF16:
		if len(raw) != 2*n*k {
			return nil, fmt.Errorf("ggml matmul %dx%d F16: %d bytes: %w", n, k, len(raw), ErrBadModel)
		}
		m.w = make([]float32, n*k)
		for i := range m.w {
			m.w[i] = gguf.F16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	case gguf.TypeF32:
		if len(raw) != 4*n*k {
			return nil, fmt.Errorf("ggml matmul %dx%d F32: %d bytes: %w", n, k, len(raw), ErrBadModel)
		}
		m.w = make([]float32, n*k)
		for i := range m.w {
			m.w[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	default:
		return nil, fmt.Errorf("ggml matmul %dx%d: type %s: %w (ggml-exact weights: Q8_0, F16, F32)", n, k, t, ErrUnsupported)
	}
	m.vec = mulMatID || n%4 != 0 || k%8 != 0
	return m, nil
}

// Dims implements Linear.
func (m *ggmlMatmul) Dims() (int, int) { return m.n, m.k }

// ggmlTokenBlock is the number of tokens whose dot products Apply computes against each weight row in
// turn, while that row is in cache (a 5120-wide Q8_0 row is 5 KiB, an F16 one 20 KiB as float32):
// otherwise every token streams the whole weight from memory. Each output is the same dot product.
const ggmlTokenBlock = 8

// Apply implements Linear.
func (m *ggmlMatmul) Apply(y, x []float32) error {
	n, k := m.n, m.k
	if err := checkApply(y, x, n, k); err != nil {
		return err
	}
	t := len(x) / k
	parallelRows(t, t*n*k, 0, func(r0, r1 int) {
		tb := min(ggmlTokenBlock, r1-r0)
		xqs, x16s, xrs := make([]q8Row, tb), make([][]int16, tb), make([][]float32, tb)
		for j := range tb {
			switch m.typ {
			case gguf.TypeQ8_0:
				xqs[j], x16s[j] = q8Row{q: make([]int8, k), d: make([]float32, k/32)}, make([]int16, k)
			case gguf.TypeF16:
				xrs[j] = make([]float32, k)
			}
		}
		for b0 := r0; b0 < r1; b0 += tb {
			b1 := min(b0+tb, r1)
			for r := b0; r < b1; r++ { // the block's inputs in the weight's vec_dot_type
				xs := x[r*k : (r+1)*k]
				switch m.typ {
				case gguf.TypeQ8_0:
					quantizeQ8_0AVX2(xqs[r-b0], xs)
					for j, c := range xqs[r-b0].q {
						x16s[r-b0][j] = int16(c)
					}
				case gguf.TypeF16:
					copy(xrs[r-b0], xs)
					fma.Round16(xrs[r-b0])
				default:
					xrs[r-b0] = xs
				}
			}
			for i := range n {
				if m.typ == gguf.TypeQ8_0 { // four tokens a call, the last group padded with its last token
					w := q8Row{q: m.q8.q[i*k : (i+1)*k], d: m.q8.d[i*k/32 : (i+1)*k/32]}
					for r := b0; r < b1; r += 4 {
						var xq [4][]int16
						var xd [4][]float32
						var out [4]float32
						for j := range 4 {
							s := min(r+j, b1-1) - b0
							xq[j], xd[j] = x16s[s], xqs[s].d
						}
						dotsQ8_0(&out, w, &xq, &xd)
						for j := 0; j < 4 && r+j < b1; j++ {
							y[(r+j)*n+i] = out[j]
						}
					}
					continue
				}
				w := m.w[i*k : (i+1)*k]
				for r := b0; r < b1; r++ {
					xr := xrs[r-b0]
					switch {
					case !m.vec:
						y[r*n+i] = dotTiny(w, xr)
					case m.typ == gguf.TypeF16:
						y[r*n+i] = dotVecF16(w, xr)
					default:
						y[r*n+i] = dotVecF32(w, xr)
					}
				}
			}
		}
	})
	return nil
}
