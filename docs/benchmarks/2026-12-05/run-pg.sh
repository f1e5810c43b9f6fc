#!/bin/sh
# PostgreSQL after a change (final: 4ef2166, the notify; final2: 950ae35, lease_until): fence bench three times,
# then --peers with five contended rounds, with the load average around
# each run. B: directory with fence and fence-bench-peers; OUT: results.
set -u
B=${B:?directory with fence and fence-bench-peers}; OUT=${OUT:-out}
mkdir -p "$OUT"
log() { echo "$(date -u +%H:%M:%S) $*; load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/run.log"; }
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
for i in 1 2 3; do
  log "start bench postgres $i"; $B/fence bench --dsn "$PG" --json > $OUT/bench-postgres-$i.json 2> $OUT/bench-postgres-$i.err; log "end bench postgres $i rc=$?"
done
log "start peers postgres"; FENCE_BENCH_PEERS=$B/fence-bench-peers $B/fence bench --dsn "$PG" --peers --contended-rounds 5 --json > $OUT/peers-postgres.json 2> $OUT/peers-postgres.err; log "end peers postgres rc=$?"
log done
