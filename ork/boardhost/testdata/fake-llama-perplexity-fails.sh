#!/bin/sh
# STAND-IN for a board runtime that fails to load the pack: prints 60 lines of loader output
# (so that only the tail is reported), an error, and exits 1.
# Usage: fake-llama-perplexity-fails.sh -m STUB --ork-pack PACK
i=1
while [ $i -le 60 ]; do
	echo "llama_model_loader: - tensor $i: blk.$i.attn_q.weight q4_0 [64, 64, 1, 1]" >&2
	i=$((i + 1))
done
echo "llama_model_load: error loading model: ork: entry blk.3.ffn_down.weight: BLAKE3 mismatch" >&2
echo "main: unable to load model" >&2
exit 1
