package stages

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"os"
)

// The demo stage kinds back `orkpipe demo`: generate pseudo-random bytes from a seed, transform
// them byte by byte (xor, rotate) and join two files. They stream in demoChunk pieces, so their
// memory estimate is constant whatever the size.

const demoChunk = 64 << 10

// demoMemory is the declared peak memory of every demo stage: two chunks plus runtime slack.
const demoMemory = 4 << 20

// DemoGenerateParams are the parameters of "demo-generate".
type DemoGenerateParams struct {
	Seed uint64 `json:"seed"`
	Size int64  `json:"size"` // bytes, 1..1 TiB
}

// DemoXorParams are the parameters of "demo-xor".
type DemoXorParams struct {
	Key uint8 `json:"key"`
}

// DemoRotateParams are the parameters of "demo-rotate".
type DemoRotateParams struct {
	Bits int `json:"bits"` // 1..7: each byte rotated left by Bits
}

// DemoJoinParams are the parameters of "demo-join" (none; the struct keeps the params an object).
type DemoJoinParams struct{}

func init() {
	Register(Define("demo-generate", 1, func(p DemoGenerateParams) (Spec, error) {
		if p.Size < 1 || p.Size > 1<<40 {
			return Spec{}, fmt.Errorf("field \"size\": %d, want 1..%d bytes", p.Size, int64(1)<<40)
		}
		return Spec{Outputs: []string{"data"}, PeakMemory: demoMemory}, nil
	}, runDemoGenerate))
	Register(Define("demo-xor", 1, func(p DemoXorParams) (Spec, error) {
		return Spec{Inputs: []string{"in"}, Outputs: []string{"out"}, PeakMemory: demoMemory}, nil
	}, func(ctx context.Context, p DemoXorParams, req Request) error {
		return mapBytes(ctx, req.Inputs["in"], req.Output("out"), func(b byte) byte { return b ^ p.Key })
	}))
	Register(Define("demo-rotate", 1, func(p DemoRotateParams) (Spec, error) {
		if p.Bits < 1 || p.Bits > 7 {
			return Spec{}, fmt.Errorf("field \"bits\": %d, want 1..7", p.Bits)
		}
		return Spec{Inputs: []string{"in"}, Outputs: []string{"out"}, PeakMemory: demoMemory}, nil
	}, func(ctx context.Context, p DemoRotateParams, req Request) error {
		return mapBytes(ctx, req.Inputs["in"], req.Output("out"), func(b byte) byte { return bits.RotateLeft8(b, p.Bits) })
	}))
	Register(Define("demo-join", 1, func(DemoJoinParams) (Spec, error) {
		return Spec{Inputs: []string{"a", "b"}, Outputs: []string{"data", "manifest.json"}, PeakMemory: demoMemory}, nil
	}, runDemoJoin))
}

func runDemoGenerate(ctx context.Context, p DemoGenerateParams, req Request) error {
	f, err := os.OpenFile(req.Output("data"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))
	buf := make([]byte, demoChunk)
	for left := p.Size; left > 0; {
		if err := ctx.Err(); err != nil {
			f.Close()
			return err
		}
		n := min(left, demoChunk)
		for i := 0; i < int(n); i += 8 {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], rng.Uint64())
			copy(buf[i:n], w[:])
		}
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return fmt.Errorf("writing %s: %w", f.Name(), err)
		}
		left -= n
	}
	return f.Close()
}

// mapBytes streams in through fn into a new file at dst, checking the input's size at EOF.
func mapBytes(ctx context.Context, in File, dst string, fn func(byte) byte) error {
	src, err := os.Open(in.Path)
	if err != nil {
		return err
	}
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if err := copyMapped(ctx, out, io.NewSectionReader(src, 0, in.Size), fn); err != nil {
		out.Close()
		return fmt.Errorf("%s -> %s: %w", in.Path, dst, err)
	}
	return out.Close()
}

// copyMapped copies r (a SectionReader over a ReaderAt) to w chunk by chunk, applying fn (nil:
// identity), and fails if r holds fewer bytes than its section claims.
func copyMapped(ctx context.Context, w io.Writer, r *io.SectionReader, fn func(byte) byte) error {
	buf := make([]byte, demoChunk)
	var off int64
	for off < r.Size() {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := r.ReadAt(buf[:min(r.Size()-off, demoChunk)], off)
		if err != nil && !(err == io.EOF && int64(n) == r.Size()-off) {
			return fmt.Errorf("reading at offset %d of %d: %w", off, r.Size(), err)
		}
		if fn != nil {
			for i := range buf[:n] {
				buf[i] = fn(buf[i])
			}
		}
		if _, err := w.Write(buf[:n]); err != nil {
			return err
		}
		off += int64(n)
	}
	return nil
}

func runDemoJoin(ctx context.Context, _ DemoJoinParams, req Request) error {
	out, err := os.OpenFile(req.Output("data"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	for _, name := range []string{"a", "b"} {
		in := req.Inputs[name]
		src, err := os.Open(in.Path)
		if err != nil {
			out.Close()
			return err
		}
		err = copyMapped(ctx, out, io.NewSectionReader(src, 0, in.Size), nil)
		src.Close()
		if err != nil {
			out.Close()
			return fmt.Errorf("joining input %q (%s): %w", name, in.Path, err)
		}
	}
	if err := out.Close(); err != nil {
		return err
	}
	type part struct {
		Name   string `json:"name"`
		Digest string `json:"digest"`
		Size   int64  `json:"size"`
	}
	manifest := struct {
		Parts []part `json:"parts"`
		Size  int64  `json:"size"`
	}{}
	for _, name := range []string{"a", "b"} {
		in := req.Inputs[name]
		manifest.Parts = append(manifest.Parts, part{Name: name, Digest: in.Digest.String(), Size: in.Size})
		manifest.Size += in.Size
	}
	b, err := json.MarshalIndent(manifest, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(req.Output("manifest.json"), append(b, '\n'), 0o644)
}
