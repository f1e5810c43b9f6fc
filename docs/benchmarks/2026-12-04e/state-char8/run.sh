#!/bin/sh
# MariaDB, the contended scenario before and after schema version 4 (the
# lease state as CHAR(8)), interleaved: m0 = fence and fence-bench-peers
# built from d338ecc (schema 3), s8 = built from 6b7bb69 (schema 4). Each
# run: the peers' operations briefly (--rounds 1 --budget 50ms), then five
# contended rounds; ShedLock in the same run is the yardstick.
# M0 and S8 are directories holding the two builds.
set -eu
for i in 1 2; do
  for v in m0 s8; do
    dir=$M0; [ $v = s8 ] && dir=$S8
    FENCE_BENCH_PEERS=$dir/fence-bench-peers $dir/fence bench --dsn mysql://root@127.0.0.1:3306/test \
      --peers --rounds 1 --budget 50ms --contended-rounds 5 --redis '' --json > $v-$i.json
  done
done
