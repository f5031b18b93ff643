package stages

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"orkpipe/artifacts"
	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
)

// Token-sequences file ("tokens" output of tokenize), little-endian:
//
//	offset  size          field
//	0       8             magic "ORKTOK\x00\x01"
//	8       4             u32 n_seq
//	12      4             u32 seq_len
//	16      n_seq·len·4   int32 token ids, sequence by sequence (each starts with BOS when the vocabulary has one)
//	end-32  32            BLAKE3-256 of every byte before it

var tokensMagic = [8]byte{'O', 'R', 'K', 'T', 'O', 'K', 0, 1}

// TokenizeParams are the parameters of "tokenize": how many sequences of how many tokens to cut from
// the start of the corpus (tokenized whole with the model's tokenizer, BOS first).
type TokenizeParams struct {
	Sequences int `json:"sequences"`
	Ctx       int `json:"ctx"`
	// CorpusName labels the corpus in errors (the file's base name; the stage sees a store path).
	CorpusName string `json:"corpus_name"`
}

func init() {
	Register(Define("tokenize", 2, func(p TokenizeParams) (Spec, error) {
		if p.Sequences < 1 || p.Ctx < 2 {
			return Spec{}, fmt.Errorf("sequences %d, ctx %d: want >= 1 and >= 2", p.Sequences, p.Ctx)
		}
		return Spec{Inputs: []string{"model", "corpus"}, Outputs: []string{"tokens"},
			PeakMemory: 256<<20 + int64(p.Sequences)*int64(p.Ctx)*8}, nil
	}, runTokenize))
}

func runTokenize(ctx context.Context, p TokenizeParams, req Request) error {
	mf := req.Inputs["model"]
	f, err := gguf.Open(ctx, mf.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	tok, err := model.TokenizerFromGGUF(f)
	if err != nil {
		return fmt.Errorf("tokenizer of %s: %w", mf.Path, err)
	}
	corpus := req.Inputs["corpus"]
	label := p.CorpusName
	if label == "" {
		label = corpus.Path
	}
	text, err := os.ReadFile(corpus.Path)
	if err != nil {
		return err
	}
	ids, err := tok.Encode(string(text), true, false)
	if err != nil {
		return fmt.Errorf("tokenizing the calibration corpus %s: %w", label, err)
	}
	need := p.Sequences * p.Ctx
	if len(ids) < need {
		return fmt.Errorf("calibration corpus %s is too short: %d tokens, calibration needs sequences x ctx = %d x %d = %d; it holds %d sequences of %d (lower the sequences or the ctx, or give a longer corpus)",
			label, len(ids), p.Sequences, p.Ctx, need, len(ids)/p.Ctx, p.Ctx)
	}
	bos := model.NoToken
	if v := tok.Vocab(); v.AddBOS {
		bos = v.BOS
	}
	seqs, err := calib.Sequences(ids, p.Sequences, p.Ctx, bos)
	if err != nil {
		return fmt.Errorf("calibration corpus %s: %w", label, err)
	}
	return writeTokens(req.Output("tokens"), seqs, p.Ctx)
}

func writeTokens(path string, seqs [][]int32, ctxLen int) error {
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	h := artifacts.NewHasher()
	bw := bufio.NewWriter(io.MultiWriter(out, h))
	var hdr [16]byte
	copy(hdr[:], tokensMagic[:])
	binary.LittleEndian.PutUint32(hdr[8:], uint32(len(seqs)))
	binary.LittleEndian.PutUint32(hdr[12:], uint32(ctxLen))
	bw.Write(hdr[:])
	for _, s := range seqs {
		if err = binary.Write(bw, binary.LittleEndian, s); err != nil {
			break
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		_, err = out.Write(artifacts.DigestOf(h).Bytes())
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadTokens reads and verifies a token-sequences file.
func ReadTokens(path string) ([][]int32, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) < 48 || !bytes.Equal(data[:8], tokensMagic[:]) {
		return nil, fmt.Errorf("%w: %s: not a token-sequences file", ErrWeightFile, path)
	}
	n, l := int(binary.LittleEndian.Uint32(data[8:])), int(binary.LittleEndian.Uint32(data[12:]))
	if want := 16 + n*l*4 + 32; n < 1 || l < 1 || len(data) != want {
		return nil, fmt.Errorf("%w: %s: %d bytes for %d sequences of %d tokens", ErrWeightFile, path, len(data), n, l)
	}
	if got := artifacts.SumBytes(data[:len(data)-32]); !bytes.Equal(got.Bytes(), data[len(data)-32:]) {
		return nil, fmt.Errorf("%w: %s: BLAKE3 mismatch (corrupt)", ErrWeightFile, path)
	}
	seqs := make([][]int32, n)
	r := bytes.NewReader(data[16 : len(data)-32])
	for i := range seqs {
		seqs[i] = make([]int32, l)
		if err := binary.Read(r, binary.LittleEndian, seqs[i]); err != nil {
			return nil, err
		}
	}
	return seqs, nil
}
