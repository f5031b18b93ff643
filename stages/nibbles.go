package stages

import (
	"encoding/binary"
	"fmt"
	"io"
)

// writeNibbles writes int4 codes two a byte (the finalized-weight format's Bits 4 codes), failing,
// naming the weight, on a code outside -8..7.
func writeNibbles(w io.Writer, codes []int8, name string) error {
	var buf [32 << 10]byte
	for len(codes) > 0 {
		n := min(len(codes), 2*len(buf))
		b := buf[:(n+1)/2]
		if !packNibbles(b, codes[:n]) {
			for _, c := range codes[:n] {
				if c < -8 || c > 7 {
					return fmt.Errorf("%w: %s: int4 code %d outside -8..7", ErrWeightFile, name, c)
				}
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		codes = codes[n:]
	}
	return nil
}

// readNibbles reads the ⌈len(codes)/2⌉ bytes of packed int4 codes from r into codes. padded is
// false when the count is odd and the last byte's high nibble, the padding, is not 0.
func readNibbles(r io.Reader, codes []int8) (padded bool, err error) {
	var buf [32 << 10]byte
	out := int8Bytes(codes)
	padded = true
	for len(out) > 0 {
		n := min(len(out), 2*len(buf)) // even but for the last round
		b := buf[:(n+1)/2]
		if _, err := io.ReadFull(r, b); err != nil {
			return false, err
		}
		if n%2 == 1 && b[len(b)-1]>>4 != 0 {
			padded = false
		}
		unpackNibbles(out[:n], b)
		out = out[n:]
	}
	return padded, nil
}

const (
	lowNibbles = 0x0f0f0f0f0f0f0f0f
	nibbleSign = 0x0808080808080808
)

// packNibbles packs codes two a byte into dst (⌈len(codes)/2⌉ bytes: code 2i in byte i's low
// nibble, 2i+1 in its high nibble, a last high nibble 0), eight codes a step; it reports whether every
// code is within -8..7 (dst holds their low nibbles regardless).
func packNibbles(dst []byte, codes []int8) bool {
	b := int8Bytes(codes)
	var bad uint64
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		bad |= (x ^ x<<1) & 0xf0f0f0f0f0f0f0f0 // a byte within -8..7 has bits 3 to 7 equal
		y := x & lowNibbles
		y = (y | y>>4) & 0x00ff00ff00ff00ff // byte 2k: codes 2k and 2k+1
		y = (y | y>>8) & 0x0000ffff0000ffff
		y = (y | y>>16) & 0xffffffff
		binary.LittleEndian.PutUint32(dst[i/2:], uint32(y))
	}
	for ; i < len(b); i += 2 {
		lo, hi := b[i], byte(0)
		if i+1 < len(b) {
			hi = b[i+1]
		}
		bad |= uint64((lo^lo<<1)&0xf0 | (hi^hi<<1)&0xf0)
		dst[i/2] = lo&0x0f | hi<<4
	}
	return bad == 0
}

// unpackNibbles unpacks ⌈len(dst)/2⌉ bytes of packed int4 codes from src into dst, a byte a code
// (two's complement), eight codes a step; a padding nibble is ignored.
func unpackNibbles(dst, src []byte) {
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		z := uint64(binary.LittleEndian.Uint32(src[i/2:]))
		z = (z | z<<16) & 0x0000ffff0000ffff
		z = (z | z<<8) & 0x00ff00ff00ff00ff // byte 2k: packed byte k
		v := z&lowNibbles | (z>>4&lowNibbles)<<8
		v |= (v & nibbleSign) * 0x1e // sign-extend each nibble: bit 3 into bits 4 to 7, no carry between bytes
		binary.LittleEndian.PutUint64(dst[i:], v)
	}
	for ; i < len(dst); i++ {
		nib := src[i/2] >> (4 * (i % 2)) & 0x0f
		dst[i] = byte(int8(nib<<4) >> 4)
	}
}
