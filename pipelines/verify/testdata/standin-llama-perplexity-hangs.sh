#!/bin/sh
# STAND-IN for a board runtime that hangs (the board project saw runs stuck long past any
# sensible time); see README.md.
echo "perplexity: calculating perplexity over 4 chunks, n_ctx=128, batch_size=128, n_seq=1" >&2
echo "[1]2.7012,"
exec sleep 3600
