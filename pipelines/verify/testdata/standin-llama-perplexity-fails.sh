#!/bin/sh
# STAND-IN for a board runtime that fails to load the pack: 50 loader lines, an error, exit 3;
# see README.md.
i=1
while [ $i -le 50 ]; do
	echo "llama_model_loader: - tensor $i: blk.$i.attn_q.weight q4_0 [64, 64, 1, 1]" >&2
	i=$((i + 1))
done
echo "llama_model_load: error loading model: ork: NPU domain 3: IOMMU map failed" >&2
echo "main: unable to load model" >&2
exit 3
