package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"text/tabwriter"

	"orkpipe/ork/gguf"
)

// runInspectGGUF prints a GGUF file's header, a KV summary (arrays abbreviated) and its tensor
// table; with --json one object:
// {"version","alignment","data_offset","size","header_digest","model":{...},"kv":{KEY: VALUE},"tensors":[...]}
// where an array value is {"type":"array","elem_type":T,"len":N}.
func runInspectGGUF(ctx context.Context, opts *globalOptions, path string) error {
	f, err := gguf.Open(ctx, path)
	if err != nil {
		return err
	}
	defer f.Close()
	digest, err := f.HeaderDigest(ctx)
	if err != nil {
		return err
	}
	hd := "blake3:" + hex.EncodeToString(digest[:])
	if opts.json {
		return json.NewEncoder(opts.stdout).Encode(inspectJSON(f, hd))
	}
	w := opts.stdout
	fmt.Fprintf(w, "%s: GGUF v%d, alignment %d, %d KV, %d tensors, data offset %d, %d bytes\nheader digest %s\n\n",
		path, f.Version, f.Alignment, len(f.KV), len(f.Tensors), f.DataOffset, f.Size, hd)
	if no, count, err := f.Shard(); err != nil {
		fmt.Fprintf(w, "split: %v\n\n", err)
	} else if count > 0 {
		fmt.Fprintf(w, "split: shard %d of %d of a model split across files (llama-gguf-split): it holds %d of the model's tensors; builds read the merged file\n\n",
			no+1, count, len(f.Tensors))
	}
	fmt.Fprintf(w, "%s\n\n", modelOf(f))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTYPE\tVALUE")
	for _, kv := range f.KV {
		typ := kv.Value.Type().String()
		if kv.Value.IsArray() {
			typ = "[]" + kv.Value.ElemType().String()
		}
		val := kv.Value.String()
		if len(val) > 120 {
			val = val[:117] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", shown(kv.Key), typ, val)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(f.Tensors) == 0 {
		fmt.Fprintln(w, "\nno tensors")
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTYPE\tSHAPE\tOFFSET\tBYTES")
	for _, t := range f.Tensors {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%d\n", shown(t.Name), t.Type, t.Shape, t.Offset, t.Size)
	}
	return tw.Flush()
}

type inspectTensor struct {
	Name   string  `json:"name"`
	Type   string  `json:"type"`
	Shape  []int64 `json:"shape"`
	Offset uint64  `json:"offset"`
	Bytes  int64   `json:"bytes"`
}

type inspectOutput struct {
	Path         string `json:"path"`
	Version      uint32 `json:"version"`
	Alignment    int64  `json:"alignment"`
	DataOffset   int64  `json:"data_offset"`
	Size         int64  `json:"size"`
	HeaderDigest string `json:"header_digest"`
	// Model is the file as a model to build from (inspectModel): its shape, or its error.
	Model   inspectModel    `json:"model"`
	KV      orderedKV       `json:"kv"`
	Tensors []inspectTensor `json:"tensors"`
}

func inspectJSON(f *gguf.File, digest string) inspectOutput {
	out := inspectOutput{Path: f.Path, Version: f.Version, Alignment: f.Alignment, DataOffset: f.DataOffset,
		Size: f.Size, HeaderDigest: digest, Model: modelOf(f), KV: f.KV, Tensors: make([]inspectTensor, 0, len(f.Tensors))}
	for _, t := range f.Tensors {
		out.Tensors = append(out.Tensors, inspectTensor{t.Name, t.Type.String(), t.Shape, t.Offset, t.Size})
	}
	return out
}

// orderedKV marshals metadata as a JSON object in file order, arrays abbreviated.
type orderedKV []gguf.KV

func (o orderedKV) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, kv := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(kv.Key)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		var v any
		switch x := kv.Value.Interface().(type) {
		case float64:
			v = x
			if math.IsNaN(x) || math.IsInf(x, 0) {
				v = fmt.Sprint(x) // JSON has no NaN/Inf
			}
		default:
			v = x
		}
		if kv.Value.IsArray() {
			v = map[string]any{"type": "array", "elem_type": kv.Value.ElemType().String(), "len": kv.Value.Len()}
		}
		enc, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", kv.Key, err)
		}
		b.Write(enc)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
