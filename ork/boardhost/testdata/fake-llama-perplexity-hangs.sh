#!/bin/sh
# STAND-IN for a board runtime that hangs (the board project once saw a run in uninterruptible
# sleep long past its timeout): it starts a child that sleeps, writes the child's pid to
# --pidfile (when given), and waits for it forever.
# Usage: fake-llama-perplexity-hangs.sh -m STUB --ork-pack PACK --pidfile FILE
pidfile=
while [ $# -gt 0 ]; do
	case "$1" in
	--pidfile) pidfile=$2; shift 2 ;;
	*) shift ;;
	esac
done
echo "perplexity: calculating perplexity over 39 chunks, n_ctx=512, batch_size=512, n_seq=1" >&2
sleep 3600 &
[ -z "$pidfile" ] || echo $! > "$pidfile"
echo "[1]2.6139,"
wait
