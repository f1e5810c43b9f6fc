#!/bin/sh
# The runs of docs/benchmarks/2026-12-04b/postgres.md: the per-operation
# bench and the peers, old code (before) and this branch (after) in
# alternation, with the load average around each run.
#   before: fence and fence-bench-peers built at ddc6114 (main)
#   after:  the same two built from this branch
# BIN holds fence-{before,after} and fence-bench-peers-{before,after}.
set -u
BIN=${BIN:-/tmp/pghot-bin}
OUT=${OUT:-$(dirname "$0")/set}
DSN='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
mkdir -p "$OUT"
log() { echo "$(date -u +%H:%M:%S) $*; $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/run.log"; }
for i in ${PAIRS:-1 2 3}; do
	for v in before after; do
		log "start bench $v $i"
		"$BIN/fence-$v" bench --dsn "$DSN" --json > "$OUT/bench-$v-$i.json" 2> "$OUT/bench-$v-$i.err"
		log "end bench $v $i rc=$?"
	done
done
for i in ${PEER_PAIRS:-1 2}; do
	for v in before after; do
		log "start peers $v $i"
		FENCE_BENCH_PEERS="$BIN/fence-bench-peers-$v" "$BIN/fence-$v" bench --dsn "$DSN" --peers --redis "" --json > "$OUT/peers-$v-$i.json" 2> "$OUT/peers-$v-$i.err"
		log "end peers $v $i rc=$?"
	done
done
