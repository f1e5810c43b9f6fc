#!/bin/sh
# The measurement set of docs/BENCHMARKS.md: fence bench three times per
# database (the databases interleaved), then --peers once per database with
# five contended rounds, with the load average around each run in
# $OUT/run.log. B is the directory holding the fence and fence-bench-peers
# binaries; DBS narrows the databases (2026-12-05/final2: DBS=postgres);
# PG and MY override the server DSNs.
# Usage: B=/tmp/fb OUT=/tmp/fb/out sh docs/benchmarks/run.sh
set -u
DBS=${DBS:-postgres mysql sqlite}
B=${B:?directory with fence and fence-bench-peers}; OUT=${OUT:-out}
mkdir -p "$OUT"
log() { echo "$(date -u +%H:%M:%S) $*; load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/run.log"; }
PG=${PG:-'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'}
MY=${MY:-'mysql://root@127.0.0.1:3306/test'}
LI="sqlite:$OUT/bench.db"
dsn_of() { case $1 in postgres) echo "$PG";; mysql) echo "$MY";; sqlite) echo "$LI";; esac; }
for i in 1 2 3; do
  for db in $DBS; do
    log "start bench $db $i"; $B/fence bench --dsn "$(dsn_of $db)" --json > $OUT/bench-$db-$i.json 2> $OUT/bench-$db-$i.err; log "end bench $db $i rc=$?"
  done
done
for db in $DBS; do
  log "start peers $db"; FENCE_BENCH_PEERS=$B/fence-bench-peers $B/fence bench --dsn "$(dsn_of $db)" --peers --contended-rounds 5 --json > $OUT/peers-$db.json 2> $OUT/peers-$db.err; log "end peers $db rc=$?"
done
log done
