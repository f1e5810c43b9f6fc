#!/bin/bash
cd /tmp/idle
for rep in 1 2 3; do
 for f in $(ls fw_*.sql | shuf); do
  l0=$(psql -h 127.0.0.1 -U postgres test -Atc "select pg_current_wal_lsn()")
  out=$(pgbench -h 127.0.0.1 -U postgres -n -M prepared -c 1 -T 4 -f $f test 2>&1)
  l1=$(psql -h 127.0.0.1 -U postgres test -Atc "select pg_current_wal_lsn()")
  n=$(echo "$out" | grep "actually processed" | awk '{print $6}' | cut -d/ -f1)
  wal=$(psql -h 127.0.0.1 -U postgres test -Atc "select pg_wal_lsn_diff('$l1','$l0')")
  echo "$f lat=$(echo "$out" | grep 'latency average' | awk '{print $4}') wal_per_tx=$(( ${wal%.*} / n )) load=$(cut -d' ' -f1 /proc/loadavg)"
 done
done
