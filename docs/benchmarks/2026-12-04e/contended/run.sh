#!/bin/sh
# MariaDB, 16 workers on 1,000 names, 4 s per run, ROUNDS rounds with the
# four runs interleaved:
#   raw shedlock     ShedLock's statements on ShedLock's table (raw.go)
#   raw fence        fence's acquire and release statements, sent by hand,
#                    on fence's table (raw.go)
#   store raw        the same statements on a Store's handle (store.go -raw)
#   store            Store.Acquire and Store.Release (store.go)
# Run from the repository root: sh docs/benchmarks/2026-12-04e/contended/run.sh
set -eu
D=docs/benchmarks/2026-12-04e/contended
ROUNDS=${ROUNDS:-3}
RAW='root@tcp(127.0.0.1:3306)/test?clientFoundRows=true'
FENCE='mysql://root@127.0.0.1:3306/test'
go build -o /tmp/contended-raw $D/raw.go
go build -o /tmp/contended-store $D/store.go
for r in $(seq "$ROUNDS"); do
  echo "round $r: raw shedlock $(/tmp/contended-raw -driver mysql -dsn "$RAW" -setup $D/mariadb_shedlock_table.sql -lock "$(grep -v '^--' $D/shedlock_lock.sql)" -unlock "$(grep -v '^--' $D/shedlock_unlock.sql)" -ownerfirst -d 4s)" \
    "| raw fence $(/tmp/contended-raw -driver mysql -dsn "$RAW" -setup $D/mariadb_fence_table.sql -lock "$(grep -v '^--' $D/fence_acquire.sql)" -unlock "$(grep -v '^--' $D/fence_release.sql)" -ownerfirst -d 4s)" \
    "| store raw $(/tmp/contended-store -raw -dsn "$FENCE")" \
    "| store $(/tmp/contended-store -dsn "$FENCE")"
done
mysql -h127.0.0.1 -uroot test -e 'DROP TABLE IF EXISTS zz_leases, zz_shed'
