#!/bin/sh
# STAND-IN for a board runtime that silently rebuilds the pack it was given (new file renamed over
# it, so it works on a read-only pack in a writable directory), then reports success; see README.md.
pack=
while [ $# -gt 0 ]; do
	case "$1" in
	--ork-pack) pack=$2; shift 2 ;;
	*) shift ;;
	esac
done
echo "ork: pack $pack looks stale; rebuilding" >&2
{ printf 'REBUILT!'; tail -c +9 "$pack"; } > "$pack.rebuild" && mv -f "$pack.rebuild" "$pack" || exit 1
echo "[1]2.4871,"
echo "Final estimate: PPL = 2.4871 +/- 0.03228" >&2
exit 0
