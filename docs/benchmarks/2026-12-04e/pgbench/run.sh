#!/bin/sh
# Server-side cost of one acquire-and-release cycle on PostgreSQL, one
# client, prepared statements, with synchronous_commit off (so the numbers
# are the statements' work, not the disk's flush) and then on. Each script
# runs ROUNDS times for T seconds, the scripts interleaved; the output is
# the mean latency per cycle of every run.
#
#   shedlock.pgb                  ShedLock's two statements on its own table
#   shedlock_on_fence_table.pgb   the same two statements on fence's table
#   fence.pgb                     fence's acquire (plain UPDATE ... RETURNING)
#                                 and release, as the driver sends them
#   fence_release_without_notify.pgb  fence.pgb, the release without the
#                                 handoff's try-lock-or-NOTIFY
#   fence_release_returning_0.pgb fence's release without the lapse re-check
#                                 (RETURNING 0)
#   fence_release_plain.pgb       fence's release without RETURNING
#   fence_both_plain.pgb          fence's acquire and release without RETURNING
#
# Tables zz_leases (fence's schema) and zz_shedlock are created in $DB and
# dropped at the end.
set -eu
cd "$(dirname "$0")"
DB=${DB:-test}; T=${T:-6}; ROUNDS=${ROUNDS:-3}
P="-h 127.0.0.1 -U postgres"
psql -q $P "$DB" -f setup.sql
for sync in off on; do
  for r in $(seq "$ROUNDS"); do
    for s in shedlock shedlock_on_fence_table fence fence_release_without_notify fence_release_returning_0 fence_release_plain fence_both_plain; do
      lat=$(PGOPTIONS="-c synchronous_commit=$sync" pgbench -n $P -M prepared -c 1 -T "$T" -f "$s.pgb" "$DB" 2>&1 | awk '/latency average/ {print $4}')
      echo "synchronous_commit=$sync round $r $s $lat ms"
    done
  done
done
psql -q $P "$DB" -c 'DROP TABLE zz_leases, zz_shedlock'
