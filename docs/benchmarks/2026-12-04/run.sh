#!/usr/bin/env bash
# run.sh OUTDIR: every measurement of docs/BENCHMARKS.md (2026-12-04), each
# database in turn. $BIN holds: fence and fence-bench-peers built from this
# round's code; fence-bench-old, internal/bench/cmd/fence-bench built at
# 98a8143; fence-bench-old-shuffled, the same with only the per-round
# shuffle of internal/bench/run.go added.
set -u
out=$1; mkdir -p "$out"
B=${BIN:?set BIN to the folder of the four binaries}
declare -A DSN=([sqlite]="sqlite:$out/bench.db" [postgres]="postgres://postgres@127.0.0.1:5432/test?sslmode=disable" [mysql]="mysql://root@127.0.0.1:3306/test")
for db in sqlite postgres mysql; do
  d=${DSN[$db]}
  echo "$(date -u +%T) $db load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/log"
  $B/fence-bench-old --dsn "$d" --redis "" --json > "$out/$db.before.json" 2> "$out/$db.before.err"
  echo "$(date -u +%T) $db before done load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/log"
  $B/fence-bench-old-shuffled --dsn "$d" --redis "" --json > "$out/$db.before-shuffled.json" 2> "$out/$db.before-shuffled.err"
  echo "$(date -u +%T) $db before-shuffled done load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/log"
  $B/fence bench --dsn "$d" --json > "$out/$db.json" 2> "$out/$db.err"
  echo "$(date -u +%T) $db after done load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/log"
  $B/fence bench --dsn "$d" --peers --json > "$out/$db.peers.json" 2> "$out/$db.peers.err"
  echo "$(date -u +%T) $db peers done load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/log"
done
