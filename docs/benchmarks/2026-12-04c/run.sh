#!/bin/sh
# Final measurement set: fence bench and --peers on all three databases,
# the PostgreSQL handoff scale step, with the load average around each run.
set -u
B=/tmp/final/bin; OUT=/tmp/final/out
mkdir -p "$OUT"
log() { echo "$(date -u +%H:%M:%S) $*; load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/run.log"; }
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
MY='mysql://root@127.0.0.1:3306/test'
LI="sqlite:/tmp/final/bench.db"
for db in postgres mysql sqlite; do
  case $db in postgres) dsn=$PG;; mysql) dsn=$MY;; sqlite) dsn=$LI;; esac
  log "start bench $db"; $B/fence bench --dsn "$dsn" --json > $OUT/bench-$db.json 2> $OUT/bench-$db.err; log "end bench $db rc=$?"
done
for db in postgres mysql sqlite; do
  case $db in postgres) dsn=$PG;; mysql) dsn=$MY;; sqlite) dsn=$LI;; esac
  log "start peers $db"; FENCE_BENCH_PEERS=$B/fence-bench-peers $B/fence bench --dsn "$dsn" --peers --json > $OUT/peers-$db.json 2> $OUT/peers-$db.err; log "end peers $db rc=$?"
done
for db in postgres mysql sqlite; do
  case $db in postgres) dsn=$PG;; mysql) dsn=$MY;; sqlite) dsn=$LI;; esac
  log "start handoff $db"; $B/fence bench --dsn "$dsn" --scale --steps handoff --json > $OUT/handoff-$db.json 2> $OUT/handoff-$db.err; log "end handoff $db rc=$?"
done
log done
