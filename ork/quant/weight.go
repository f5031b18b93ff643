package quant

import (
	"fmt"
	"math"
)

// Matrix is a float32 weight (or activation set), row-major Rows x Cols. For a weight Rows = N
// (output channels) and Cols = K (input features); for activations Rows = tokens.
type Matrix struct {
	Name       string // used in error messages (e.g. "blk.0.ffn_down.weight")
	Rows, Cols int
	Data       []float32 // len Rows*Cols
}

// Row returns row i (aliasing Data).
func (m Matrix) Row(i int) []float32 { return m.Data[i*m.Cols : (i+1)*m.Cols] }

// Validate checks the dimensions, the data length and that every value is finite.
func (m Matrix) Validate() error {
	if m.Rows <= 0 || m.Cols <= 0 {
		return fmt.Errorf("%s: dimensions %dx%d: %w (want positive rows and cols)", m.Name, m.Rows, m.Cols, ErrShape)
	}
	if len(m.Data) != m.Rows*m.Cols {
		return fmt.Errorf("%s: data has %d values, want rows*cols = %d: %w", m.Name, len(m.Data), m.Rows*m.Cols, ErrShape)
	}
	for i, v := range m.Data {
		if math.Float32bits(v)&0x7f800000 == 0x7f800000 { // exponent all ones: ±Inf or NaN
			return fmt.Errorf("%s: value %v at row %d col %d: %w", m.Name, v, i/m.Cols, i%m.Cols, ErrNotFinite)
		}
	}
	return nil
}

// Weight is a quantized matmul weight: what the tiler, the pack and the evaluator consume.
// See the package doc for the code ranges and the scale layout.
type Weight struct {
	N, K     int      // output channels, logical input features
	KP       int      // stored row length: K, or the rotation's padded length
	Bits     int      // 4 or 8
	Group    int      // group size along KP; 0 = one scale per output channel
	Rotation Rotation // zero value: not rotated
	Codes    []int8   // [N][KP]
	Scales   []float32
	// QErr is the diag(H)-weighted relative error of the final weights when a Hessian was used
	// (GPTQ, or RTN with one), else the plain relative Frobenius error; both as
	// sqrt(Σ d·(W-Q)² / Σ d·W²). Measured in the rotated space when rotated; with padding that
	// is an upper bound of the error a zero-padded activation sees.
	QErr float64
	// InputClip is the activation clip ratio GPTQ's quantized inputs used (WithQuantizedInputs), 0
	// when it saw float inputs.
	InputClip float64
}

// Groups returns the number of scales per row: ceil(KP/Group), or 1 per channel.
func (w *Weight) Groups() int { return numGroups(w.KP, w.Group) }

func numGroups(kp, group int) int {
	if group == 0 {
		return 1
	}
	return (kp + group - 1) / group
}

// groupSize returns the effective group length (KP for per channel).
func effGroup(kp, group int) int {
	if group == 0 {
		return kp
	}
	return group
}

// Validate checks the weight's invariants: sizes, code range, finite scales (negative ones come
// from WithNegativeScales),
// and a rotation consistent with K and KP.
func (w *Weight) Validate() error {
	if w.N <= 0 || w.K <= 0 || w.KP < w.K {
		return fmt.Errorf("weight %dx%d (KP %d): %w", w.N, w.K, w.KP, ErrShape)
	}
	if err := checkBitsGroup(w.Bits, w.Group); err != nil {
		return err
	}
	if w.Rotation.IsZero() {
		if w.KP != w.K {
			return fmt.Errorf("weight: KP %d != K %d without rotation: %w", w.KP, w.K, ErrShape)
		}
	} else if err := w.Rotation.Validate(); err != nil {
		return err
	} else if w.Rotation.K != w.K || w.Rotation.Padded != w.KP {
		return fmt.Errorf("weight: rotation for K=%d padded %d does not match K=%d KP=%d: %w",
			w.Rotation.K, w.Rotation.Padded, w.K, w.KP, ErrShape)
	}
	if len(w.Codes) != w.N*w.KP {
		return fmt.Errorf("weight: %d codes, want N*KP = %d: %w", len(w.Codes), w.N*w.KP, ErrShape)
	}
	if len(w.Scales) != w.N*w.Groups() {
		return fmt.Errorf("weight: %d scales, want N*groups = %d: %w", len(w.Scales), w.N*w.Groups(), ErrShape)
	}
	lo, hi := codeRange(w.Bits)
	for i, c := range w.Codes {
		if int(c) < lo || int(c) > hi {
			return fmt.Errorf("weight: code %d at row %d col %d outside [%d, %d]: %w", c, i/w.KP, i%w.KP, lo, hi, ErrParam)
		}
	}
	for i, s := range w.Scales {
		if math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
			return fmt.Errorf("weight: scale %v at index %d: %w (want finite)", s, i, ErrNotFinite)
		}
	}
	return nil
}

// Dequantize returns code·scale as a float32 row-major [N][KP] matrix (in the rotated space
// when the weight is rotated).
func (w *Weight) Dequantize() []float32 {
	out := make([]float32, w.N*w.KP)
	w.dequantizeInto(out)
	return out
}

func (w *Weight) dequantizeInto(out []float32) { w.dequantizeRows(out, 0, w.N) }

// dequantizeRows writes rows [lo, hi) of code·scale into out ([hi-lo][KP]).
func (w *Weight) dequantizeRows(out []float32, lo, hi int) {
	g := effGroup(w.KP, w.Group)
	ng := w.Groups()
	for n := lo; n < hi; n++ {
		row := w.Codes[n*w.KP : (n+1)*w.KP]
		sc := w.Scales[n*ng : (n+1)*ng]
		o := out[(n-lo)*w.KP : (n-lo+1)*w.KP]
		for k, c := range row {
			o[k] = float32(c) * sc[k/g]
		}
	}
}

func checkBitsGroup(bits, group int) error {
	if bits != 4 && bits != 8 {
		return fmt.Errorf("bits %d: %w (want 4 or 8)", bits, ErrParam)
	}
	switch group {
	case 0, 32, 64, 128, 256, 512:
	default:
		return fmt.Errorf("group size %d: %w (want 0 for per channel, or 32, 64, 128, 256, 512)", group, ErrParam)
	}
	return nil
}

// codeRange returns the inclusive code range for a width: [-8, 7] or [-127, 127].
func codeRange(bits int) (lo, hi int) {
	if bits == 4 {
		return -8, 7
	}
	return -127, 127
}

// qmax returns the code magnitude the scale maps amax to: 7 or 127.
func qmax(bits int) float64 {
	if bits == 4 {
		return 7
	}
	return 127
}
