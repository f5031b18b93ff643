#!/bin/sh
# STAND-IN for the board runtime (llama-perplexity + ork NPU backend); see README.md.
stub= pack= text= kld=
while [ $# -gt 0 ]; do
	case "$1" in
	-m) stub=$2; shift 2 ;;
	--ork-pack) pack=$2; shift 2 ;;
	-f) text=$2; shift 2 ;;
	--kl-divergence) kld=1; shift ;;
	*) echo "error: unknown argument: $1" >&2; exit 2 ;;
	esac
done
for f in "$stub" "$pack" $text; do
	[ -r "$f" ] || { echo "error: cannot read '$f'" >&2; exit 1; }
done
echo "llama_model_loader: loaded meta data from $stub (version GGUF V3 (latest))" >&2
echo "ork: loaded pack $pack" >&2
if [ -z "$kld" ]; then
	echo "perplexity: calculating perplexity over 4 chunks, n_ctx=128, batch_size=128, n_seq=1" >&2
	echo "[1]2.7012,[2]2.6911,[3]2.6850,[4]2.6798,"
	echo "Final estimate: PPL = 2.6798 +/- 0.03512" >&2
else
	cat <<'OUT'
====== Perplexity statistics ======
Mean PPL(Q)                   :   2.679800 ±   0.035171
Mean PPL(base)                :   2.487100 ±   0.032280

====== KL divergence statistics ======
Mean    KLD:   0.065580 ±   0.000832
Maximum KLD:   2.811254
Median  KLD:   0.037221
Minimum KLD:  -0.000003
OUT
fi
exit 0
