//go:build ignore

// gen_rounds writes the seven rounds of hash8AVX2 (hash8_amd64.s), between its BEGIN ROUNDS and
// END ROUNDS lines: each half round's four G functions interleaved step by step, so that every
// step is four independent operations, with the state v0-v15 in Y0-Y15 and the message words of
// the block at j*32(SP). The rotations by 16 and 8 are byte shuffles; those by 12 and 7 need a
// scratch register, so v8 (Y8) is spilled to 640(SP) around each group of four.
//
//	go generate ./internal/blake3x
package main

import (
	"bytes"
	"fmt"
	"log"
	"os"
)

// msgPermutation is BLAKE3's: round r+1 reads word perm[i] of round r's order at position i.
var msgPermutation = [16]int{2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8}

// The state words of the column and the diagonal steps' four G functions: a, b, c, d.
var (
	columns   = [4][4]int{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}
	diagonals = [4][4]int{{0, 5, 10, 15}, {1, 6, 11, 12}, {2, 7, 8, 13}, {3, 4, 9, 14}}
)

func main() {
	const path = "hash8_amd64.s"
	src, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	begin, end := []byte("\t// BEGIN ROUNDS (gen_rounds.go)\n"), []byte("\t// END ROUNDS\n")
	i, j := bytes.Index(src, begin), bytes.Index(src, end)
	if i < 0 || j < i {
		log.Fatalf("%s: no BEGIN ROUNDS ... END ROUNDS region", path)
	}
	var b bytes.Buffer
	b.Write(src[:i+len(begin)])
	rounds(&b)
	b.Write(src[j:])
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}

func rounds(b *bytes.Buffer) {
	var sched [16]int
	for i := range sched {
		sched[i] = i
	}
	for r := range 7 {
		fmt.Fprintf(b, "\n\t// Round %d\n", r+1)
		half(b, columns, sched[0:8])
		half(b, diagonals, sched[8:16])
		var next [16]int
		for i := range next {
			next[i] = sched[msgPermutation[i]]
		}
		sched = next
	}
}

// half writes the four G functions g (state words a, b, c, d each) of a half round; G i adds the
// message words m[2i] and m[2i+1].
func half(b *bytes.Buffer, g [4][4]int, m []int) {
	each := func(format string, args func(i int) []any) {
		for i := range 4 {
			fmt.Fprintf(b, "\t"+format+"\n", args(i)...)
		}
	}
	y := func(v int) string { return fmt.Sprintf("Y%d", v) }
	quarter := func(word int, rot string, right, left int) {
		each("VPADDD  %d(SP), %s, %s", func(i int) []any { return []any{m[2*i+word] * 32, y(g[i][0]), y(g[i][0])} })
		each("VPADDD  %s, %s, %s", func(i int) []any { return []any{y(g[i][1]), y(g[i][0]), y(g[i][0])} })
		each("VPXOR   %s, %s, %s", func(i int) []any { return []any{y(g[i][0]), y(g[i][3]), y(g[i][3])} })
		each("VPSHUFB "+rot+"<>+0(SB), %s, %s", func(i int) []any { return []any{y(g[i][3]), y(g[i][3])} })
		each("VPADDD  %s, %s, %s", func(i int) []any { return []any{y(g[i][3]), y(g[i][2]), y(g[i][2])} })
		each("VPXOR   %s, %s, %s", func(i int) []any { return []any{y(g[i][2]), y(g[i][1]), y(g[i][1])} })
		fmt.Fprintf(b, "\tVMOVDQU Y8, 640(SP)\n")
		for i := range 4 {
			v := y(g[i][1])
			fmt.Fprintf(b, "\tVPSRLD  $%d, %s, Y8\n\tVPSLLD  $%d, %s, %s\n\tVPOR    Y8, %s, %s\n", right, v, left, v, v, v, v)
		}
		fmt.Fprintf(b, "\tVMOVDQU 640(SP), Y8\n")
	}
	quarter(0, "rot16x8", 12, 20)
	quarter(1, "rot8x8", 7, 25)
}
