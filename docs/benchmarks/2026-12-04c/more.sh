#!/bin/sh
B=/tmp/final/bin; OUT=/tmp/final/out
log() { echo "$(date -u +%H:%M:%S) $*; load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/run.log"; }
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
MY='mysql://root@127.0.0.1:3306/test'
LI="sqlite:/tmp/final/bench.db"
for i in 2 3; do
for db in postgres mysql sqlite; do
  case $db in postgres) dsn=$PG;; mysql) dsn=$MY;; sqlite) dsn=$LI;; esac
  log "start bench $db $i"; $B/fence bench --dsn "$dsn" --json > $OUT/bench-$db-$i.json 2> $OUT/bench-$db-$i.err; log "end bench $db $i rc=$?"
done
done
log "start decomp"; bash /tmp/idle/decomp.sh > $OUT/decomp.txt 2>&1; log "end decomp"
log more-done
