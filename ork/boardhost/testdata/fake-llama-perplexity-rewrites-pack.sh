#!/bin/sh
# STAND-IN for a board runtime that silently rebuilds its pack in place (the board project's
# loader-gate disagreement): it overwrites the first bytes of the --ork-pack file, keeping its
# size, then prints a perfectly plausible result and exits 0.
# Usage: fake-llama-perplexity-rewrites-pack.sh -m STUB --ork-pack PACK
stub= pack=
while [ $# -gt 0 ]; do
	case "$1" in
	-m) stub=$2; shift 2 ;;
	--ork-pack) pack=$2; shift 2 ;;
	*) shift ;;
	esac
done
echo "ork: pack $pack looks stale; rebuilding" >&2
printf 'REBUILT!' | dd of="$pack" bs=1 seek=0 conv=notrunc 2>/dev/null || exit 1
echo "[1]2.4871,[2]2.4871,"
echo "Final estimate: PPL = 2.4871 +/- 0.03228" >&2
exit 0
