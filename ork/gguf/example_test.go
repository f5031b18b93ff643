package gguf_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"orkpipe/ork/gguf"
)

// Reading metadata and dequantizing a weight row by row. (Compiled, not run: it needs the
// shared test data.)
func Example() {
	path := filepath.Join(os.Getenv("ORKPIPE_TESTDATA"), "stories260K-Q8_0.gguf")
	ctx := context.Background()
	f, err := gguf.Open(ctx, path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	nEmbd, err := f.Uint("llama.embedding_length")
	if err != nil {
		log.Fatal(err)
	}
	w, err := f.Tensor("blk.0.attn_q.weight")
	if err != nil {
		log.Fatal(err)
	}
	row := make([]float32, w.RowLen()) // K values of one output channel
	var rows int
	for n := int64(0); n < w.Rows(); n++ {
		if err := f.ReadRows(ctx, w, n, row); err != nil {
			log.Fatal(err)
		}
		rows++
	}
	fmt.Printf("n_embd %d, %s %s %v: %d rows of %d\n", nEmbd, w.Name, w.Type, w.Shape, rows, len(row))
	// Prints: n_embd 64, blk.0.attn_q.weight Q8_0 [64 64]: 64 rows of 64
}
