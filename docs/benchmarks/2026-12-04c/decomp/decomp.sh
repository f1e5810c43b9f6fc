#!/bin/bash
# server CPU per acquire+release cycle (µs) and tps, 16 clients, 1000 leases, interleaved
cd /tmp/idle
for rep in 1 2 3; do
 for f in $(ls pm_shed.sql pd_shed.sql pd_noret.sql pd_full.sql pd_new.sql pd_newnon.sql pd_old.sql | shuf); do
  a=$(./pgcpu.sh); s=$(date +%s.%N)
  pgbench -h 127.0.0.1 -U postgres -n -M prepared -c 16 -j 2 -t 600 -f $f test > /tmp/idle/pb.out 2>&1
  b=$(./pgcpu.sh)
  tps=$(grep '^tps' /tmp/idle/pb.out | awk '{print int($3)}')
  echo "$f cpu_us=$(( (b-a)*10000 / (16*600) )) tps=$tps load=$(cut -d' ' -f1 /proc/loadavg)"
 done
done
