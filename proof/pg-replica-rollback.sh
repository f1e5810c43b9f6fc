#!/usr/bin/env bash
# proof/pg-replica-rollback.sh: fences on a real PostgreSQL failover that loses
# commits (proof/README.md, "A real replica").
#
# A scratch primary and an asynchronous streaming standby (pg_basebackup) on
# this machine, under a temporary directory, on their own ports. `fence run`
# acquires a lease a few times on the primary while the standby replays; the
# standby is then cut off from the primary (as by a network partition) and
# fence acquires again on the primary, commits the standby never receives. The
# primary dies (pg_ctl stop -m immediate), the standby is promoted, and fence
# acquires on it. Every fence the job was handed (FENCE_TOKEN, with its
# FENCE_OWNER) is logged as a downstream checker would see it. The check: no
# fence value was handed out twice, and every fence after the promotion is
# greater than every fence before it. fence's floor rule, fence =
# max(fence + 1, database clock in µs), passes; the old fence + 1 rule repeats
# the fences the standby missed.
#
#   bash proof/pg-replica-rollback.sh                 build ./cmd/fence, expect no repeat
#   bash proof/pg-replica-rollback.sh --fence BIN     use this fence binary
#   bash proof/pg-replica-rollback.sh --fence OLD --expect-repeat
#                                                     control: exit 0 only if a
#                                                     fence WAS handed out twice
#
# Exit status: 0 as expected, 1 not as expected (or the scenario did not lose
# commits, so it could not have told the rules apart), 2 setup failed.
# Runs the PostgreSQL 15 server binaries as user postgres (runuser as root,
# else sudo -n, or directly when already postgres). Never touches any other
# server: every command names 127.0.0.1 and the scratch ports
# ($FENCE_REPLICA_PORT, default 25432, and the port after it: below
# the kernel's ephemeral range, where an outgoing connection could hold it).
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PRIMARY_PORT=${FENCE_REPLICA_PORT:-25432}
STANDBY_PORT=$((PRIMARY_PORT + 1))
BEFORE=${FENCE_REPLICA_BEFORE:-3} # acquisitions the standby replays
MISSED=${FENCE_REPLICA_MISSED:-3} # acquisitions only the primary commits
AFTER=${FENCE_REPLICA_AFTER:-3}   # acquisitions on the promoted standby
LEASE=replica-rollback

fence_bin=
expect=unique
while [[ $# -gt 0 ]]; do
	case $1 in
	--fence) fence_bin=$2; shift 2 ;;
	--expect-repeat) expect=repeat; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "pg-replica-rollback: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done

now_ms() { local t=${EPOCHREALTIME//[!0-9]/}; echo $((10#$t / 1000)); }
t_start=$(now_ms)
say() { local dt=$(($(now_ms) - t_start)); printf '[%3d.%03ds] %s\n' $((dt / 1000)) $((dt % 1000)) "$*"; }
fail_setup() { say "SETUP FAILED: $*" >&2; exit 2; }

as_pg() {
	if [[ $(id -un) == postgres ]]; then "$@"
	elif [[ $EUID -eq 0 ]]; then runuser -u postgres -- "$@"
	else sudo -n -u postgres "$@"; fi
}

[[ -x $PGBIN/postgres ]] || fail_setup "no PostgreSQL server binaries in $PGBIN (set PGBIN)"
id postgres >/dev/null 2>&1 || fail_setup "no user postgres to run the scratch servers as"
for port in "$PRIMARY_PORT" "$STANDBY_PORT"; do
	if "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$port" -t 1; then
		fail_setup "something already answers on 127.0.0.1:$port; set FENCE_REPLICA_PORT to a free pair of ports"
	fi
done

as_pg true 2>/dev/null || fail_setup "cannot run commands as user postgres (need root, sudo -n, or to be postgres)"
work=$(mktemp -d "${TMPDIR:-/tmp}/fence-replica.XXXXXX")
primary=$work/pg/primary
standby=$work/pg/standby

cleanup() {
	local rc=$?
	for d in "$standby" "$primary"; do
		if [[ -f $d/postmaster.pid ]]; then
			as_pg "$PGBIN/pg_ctl" -D "$d" stop -m immediate -w >/dev/null 2>&1 || true
		fi
	done
	if [[ $rc -eq 2 && -d $work/pg ]]; then # setup failed: the servers may say why
		for d in "$primary" "$standby"; do
			[[ -f $d.log ]] && { echo "--- last lines of $d.log"; tail -n 15 "$d.log"; } >&2
		done
	fi
	as_pg rm -rf "$work/pg" 2>/dev/null || true
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
chmod 755 "$work"
mkdir "$work/pg"
# The servers' parent directory must be postgres's: initdb creates the data
# directories in it, and the sockets go there.
if [[ $EUID -eq 0 ]]; then chown postgres: "$work/pg"; else chmod 777 "$work/pg"; fi

if [[ -z $fence_bin ]]; then
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	say "building fence from $here"
	(cd "$here" && go build -o "$work/fence" ./cmd/fence) || fail_setup "go build ./cmd/fence failed"
	fence_bin=$work/fence
fi
[[ -x $fence_bin ]] || fail_setup "fence binary $fence_bin is not executable"

psql_at() { # psql_at PORT SQL: one value, unaligned
	"$PGBIN/psql" -X -q -w -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U postgres -d postgres -c "$2"
}
pg_start() { # pg_start DATADIR PORT
	as_pg "$PGBIN/pg_ctl" -D "$1" -l "$1.log" -w -t 60 \
		-o "-c port=$2 -c listen_addresses=127.0.0.1 -c unix_socket_directories=$work/pg -c fsync=off" \
		start >/dev/null || fail_setup "pg_ctl start of $1 on port $2 failed"
}
wait_until() { # wait_until WHAT PORT SQL: poll until SQL returns t, at most 30 s
	local deadline=$((SECONDS + 30))
	until [[ $(psql_at "$2" "$3" 2>/dev/null || true) == t ]]; do
		((SECONDS < deadline)) || fail_setup "timed out waiting for $1"
		sleep 0.1
	done
}

handed=$work/handed.txt # phase fence owner: what the jobs were handed
: >"$handed"
acquire() { # acquire PHASE PORT N: N runs of the job, each a new acquisition
	local phase=$1 port=$2 n=$3 i
	for ((i = 0; i < n; i++)); do
		FENCE_PHASE=$phase "$fence_bin" --dsn "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable" \
			run --lease "$LEASE" --ttl 10s -- sh -c 'echo "$FENCE_PHASE $FENCE_TOKEN $FENCE_OWNER" >>"$1"' sh "$handed" ||
			fail_setup "fence run on port $port failed"
	done
}
lease_fence() { # the fence in the lease row on PORT
	psql_at "$1" "SELECT fence_token FROM fence_leases WHERE lease_name = '$LEASE'"
}

say "fence: $("$fence_bin" version 2>/dev/null | head -n1)"
say "initdb primary, start it on 127.0.0.1:$PRIMARY_PORT"
as_pg "$PGBIN/initdb" -D "$primary" -U postgres -A trust --no-sync >"$work/initdb.log" 2>&1 || { cat "$work/initdb.log" >&2; fail_setup "initdb failed"; }
pg_start "$primary" "$PRIMARY_PORT"
"$fence_bin" --dsn "postgres://postgres@127.0.0.1:$PRIMARY_PORT/postgres?sslmode=disable" migrate >/dev/null || fail_setup "fence migrate failed"

say "pg_basebackup: asynchronous standby on 127.0.0.1:$STANDBY_PORT"
as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres -D "$standby" -R -X stream -c fast --no-sync >/dev/null 2>&1 ||
	fail_setup "pg_basebackup failed"
pg_start "$standby" "$STANDBY_PORT"
wait_until "the standby to stream" "$PRIMARY_PORT" "SELECT count(*) = 1 FROM pg_stat_replication WHERE state = 'streaming'"
say "synchronous_standby_names on the primary: '$(psql_at "$PRIMARY_PORT" "SHOW synchronous_standby_names")' (empty: commits do not wait for the standby)"

acquire before "$PRIMARY_PORT" "$BEFORE"
lsn=$(psql_at "$PRIMARY_PORT" "SELECT pg_current_wal_lsn()")
wait_until "the standby to replay $lsn" "$STANDBY_PORT" "SELECT pg_last_wal_replay_lsn() >= '$lsn'"
say "$BEFORE acquisitions on the primary, replayed by the standby: lease at fence $(lease_fence "$STANDBY_PORT") on both"

# Cut the standby off, as a partition would: without primary_conninfo its
# WAL receiver stops. Pausing replay alone is not enough, since a promotion
# first replays all WAL the standby has received.
psql_at "$STANDBY_PORT" "ALTER SYSTEM SET primary_conninfo = ''" >/dev/null
psql_at "$STANDBY_PORT" "SELECT pg_reload_conf()" >/dev/null
wait_until "the standby's WAL receiver to stop" "$STANDBY_PORT" "SELECT count(*) = 0 FROM pg_stat_wal_receiver"
wait_until "the primary to see the standby gone" "$PRIMARY_PORT" "SELECT count(*) = 0 FROM pg_stat_replication"
say "standby cut off from the primary (primary_conninfo = '', WAL receiver stopped)"

acquire missed "$PRIMARY_PORT" "$MISSED"
primary_fence=$(lease_fence "$PRIMARY_PORT")
say "$MISSED more acquisitions on the primary only: lease at fence $primary_fence there"
as_pg "$PGBIN/pg_ctl" -D "$primary" stop -m immediate -w >/dev/null || fail_setup "pg_ctl stop -m immediate failed"
say "primary stopped hard (pg_ctl stop -m immediate)"

as_pg "$PGBIN/pg_ctl" -D "$standby" promote -w -t 60 >/dev/null || fail_setup "pg_ctl promote failed"
wait_until "the promoted standby to leave recovery" "$STANDBY_PORT" "SELECT NOT pg_is_in_recovery()"
promoted_fence=$(lease_fence "$STANDBY_PORT")
say "standby promoted: lease at fence $promoted_fence there (the primary had reached $primary_fence)"
# The scenario must really have lost commits; otherwise it cannot tell the
# rules apart and passing would prove nothing.
if ((promoted_fence >= primary_fence)); then
	say "NOT AS EXPECTED: the promoted standby has every fence the primary issued ($promoted_fence >= $primary_fence), so no commit was lost and the check proves nothing" >&2
	exit 1
fi

acquire after "$STANDBY_PORT" "$AFTER"
say "$AFTER acquisitions on the promoted standby"

say "fences handed to the job (phase fence owner):"
sed 's/^/      /' "$handed"
# The downstream checker: no fence value with two owners, and every fence
# after the promotion above every fence handed out before it.
report=$(awk '
	{ n++; if ($2 in owner && owner[$2] != $3) dup = dup sprintf("fence %s handed to %s (%s) and to %s (%s); ", $2, owner[$2], phase[$2], $3, $1)
	  owner[$2] = $3; phase[$2] = $1
	  if ($1 == "after") { if (minafter == "" || $2 + 0 < minafter + 0) minafter = $2 }
	  else if (maxbefore == "" || $2 + 0 > maxbefore + 0) maxbefore = $2 }
	END {
		if (dup != "") print "REPEAT: " dup
		if (minafter + 0 <= maxbefore + 0) print "NOT INCREASING: lowest fence after the promotion " minafter " <= highest before " maxbefore
	}' "$handed")
total=$(($(now_ms) - t_start))
if [[ -n $report ]]; then
	say "$report"
	if [[ $expect == repeat ]]; then
		say "as expected for this binary: a fence was handed out twice across the failover ($(awk "BEGIN{print $total/1000}") s)"
		exit 0
	fi
	say "FAIL: fences repeated across the failover ($(awk "BEGIN{print $total/1000}") s)" >&2
	exit 1
fi
say "no fence handed out twice; every fence after the promotion is above every fence before it"
if [[ $expect == repeat ]]; then
	say "NOT AS EXPECTED: --expect-repeat, but no fence repeated ($(awk "BEGIN{print $total/1000}") s)" >&2
	exit 1
fi
say "ok ($(awk "BEGIN{print $total/1000}") s)"
