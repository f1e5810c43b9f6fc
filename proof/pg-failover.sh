#!/usr/bin/env bash
# proof/pg-failover.sh: fence on a PostgreSQL primary and standby that fail
# over again and again while fence-torture's clients run (docs/CLUSTERS.md,
# docs/adr/0005-postgres-failover.md).
#
# Two PostgreSQL 15 servers on this machine, on their own ports (default
# 5441 and 5442) under a scratch directory: a primary and a streaming
# standby (pg_basebackup). fence-torture runs its clients against the
# multi-host DSN
#   postgres://postgres@127.0.0.1:5441,127.0.0.1:5442/postgres?target_session_attrs=read-write
# and, every 3-6 s of client time, calls this script back
# (`pg-failover.sh hook`), which kill -9s the primary's whole process group,
# promotes the standby (pg_ctl promote) and rebuilds the old primary as the
# new standby from a fresh pg_basebackup. The clients find the new primary
# through the DSN.
#
# Modes (sync, async and control one after the other on the same pair):
#   sync     synchronous_standby_names = '*', synchronous_commit = on: every
#            commit reported was on the standby first. Every check of the
#            harness must hold across every failover.
#   async    synchronous_standby_names = '': before each failover the standby
#            is cut off from the primary (primary_conninfo = '') for 0.3-0.8 s
#            while the clients go on committing on the primary, so the
#            promotion loses reported commits, acquisitions included. The
#            fence floor must keep every fence handed out unique (the external
#            resources' check); fence-torture runs Store.RaiseFences after
#            each promotion (the runbook's step; --no-raise leaves it out).
#   control  async with fence-torture --old-fence-rule (test triggers restore
#            the rule before the floor, previous fence + 1): it must report a
#            fence handed out twice, which shows the async check can fail.
#   auto     pg_auto_failover instead (postgresql-15-auto-failover): a
#            monitor on the third port, two keepers; the hook kill -9s the
#            primary's keeper and postgres, the monitor promotes the
#            secondary, the old node's keeper is started again and rejoins.
#            Every check must hold, as in sync. Not in the default list: its
#            setup takes a minute or more.
#
#   bash proof/pg-failover.sh                         sync, async and control, 25 s each
#   bash proof/pg-failover.sh --modes sync,async --duration 5m --seed 7
#   bash proof/pg-failover.sh --modes auto --duration 4m
#   bash proof/pg-failover.sh --torture BIN           use this fence-torture binary
#
# Options: --modes LIST (sync,async,control,auto), --duration D (per mode,
# default 25s), --clients N (8), --ttl D (lease TTL, default 150ms),
# --seed N (default: the time), --dir DIR (scratch directory, default a new
# one under $TMPDIR; removed afterwards unless --keep or a mode failed),
# --port P (first of the ports, default $FENCE_PGFAIL_PORT or 5441; auto
# uses P+2 too), --no-raise, --keep, --min-failovers N (per mode, default
# 2; fewer is not as expected).
#
# Exit status: 0 as expected, 1 not as expected (violations, no failover,
# an async run that lost no WAL, a control that was not caught), 2 setup
# failed. Missing server binaries (and pg_autoctl, for auto) are installed
# with apt-get only under CI=true or FENCE_CI_PROVISION=1 (as .ci/run
# does). Runs the servers as user postgres (runuser as root, else sudo -n, or directly when already
# postgres). Never touches any other server: every command names
# 127.0.0.1 and the scratch ports.
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}

now_ms() { local t=${EPOCHREALTIME//[!0-9]/}; echo $((10#$t / 1000)); }
as_pg() {
	if [[ $(id -un) == postgres ]]; then "$@"
	elif [[ $EUID -eq 0 ]]; then runuser -u postgres -- "$@"
	else sudo -n -u postgres "$@"; fi
}
psql_at() { # psql_at PORT SQL: one value, unaligned
	"$PGBIN/psql" -X -q -w -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U postgres -d postgres -c "$2"
}
wait_until() { # wait_until WHAT PORT SQL [SECONDS]: poll until SQL returns t
	local deadline=$((SECONDS + ${4:-60}))
	until [[ $(psql_at "$2" "$3" 2>/dev/null || true) == t ]]; do
		((SECONDS < deadline)) || { echo "pg-failover: timed out waiting for $1" >&2; return 1; }
		sleep 0.05
	done
}
pg_start() { # pg_start DATADIR PORT
	as_pg "$PGBIN/pg_ctl" -D "$1" -l "$1.log" -w -t 60 -o "-c port=$2" start >/dev/null ||
		{ tail -n 20 "$1.log" >&2; echo "pg-failover: pg_ctl start of $1 on port $2 failed" >&2; return 1; }
}
# pg_kill DATADIR: kill -9 the server's whole process group (the postmaster
# is a process group leader), as a crash of its host would, and wait until
# the postmaster is gone.
pg_kill() {
	local pid
	pid=$(head -n1 "$1/postmaster.pid" 2>/dev/null) || return 0
	as_pg kill -KILL -- "-$pid" 2>/dev/null || as_pg kill -KILL "$pid" 2>/dev/null || true
	while as_pg kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
}
# standby_from DATADIR PORT PRIMARY_PORT: a fresh standby of the primary.
standby_from() {
	as_pg rm -rf "$1"
	as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$3" -U postgres -D "$1" -R -X stream -c fast --no-sync >/dev/null 2>&1 ||
		{ echo "pg-failover: pg_basebackup from port $3 failed" >&2; return 1; }
	pg_start "$1" "$2"
}

# ---------------------------------------------------------------------------
# The hook fence-torture runs (--failover-cmd): one failover. State in
# $FENCE_PGFAIL_STATE: ports, mode, and which node (a or b) is primary.
# Prints primary-lost, promoted and lost-wal-bytes N on stdout (read by
# fence-torture), everything else on stderr.

hook() {
	local st=${FENCE_PGFAIL_STATE:?} mode old new oldport newport oldlsn newlsn lost t0
	mode=$(cat "$st/mode")
	old=$(cat "$st/primary")
	if [[ $old == a ]]; then new=b; else new=a; fi
	oldport=$(cat "$st/port.$old")
	newport=$(cat "$st/port.$new")
	t0=$(now_ms)
	if [[ $mode != sync ]]; then
		# A partition between the two: the standby's WAL receiver stops,
		# the primary goes on committing alone.
		psql_at "$newport" "ALTER SYSTEM SET primary_conninfo = ''" >/dev/null
		psql_at "$newport" "SELECT pg_reload_conf()" >/dev/null
		wait_until "the standby's WAL receiver to stop" "$newport" "SELECT count(*) = 0 FROM pg_stat_wal_receiver" 30
		sleep "0.$((3 + RANDOM % 6))"
	fi
	oldlsn=$(psql_at "$oldport" "SELECT pg_current_wal_lsn()" 2>/dev/null || echo "")
	pg_kill "$st/pg/$old"
	echo primary-lost
	newlsn=$(psql_at "$newport" "SELECT pg_last_wal_receive_lsn()" 2>/dev/null || echo "")
	[[ -n $newlsn ]] || newlsn=$(psql_at "$newport" "SELECT pg_last_wal_replay_lsn()")
	as_pg "$PGBIN/pg_ctl" -D "$st/pg/$new" promote -w -t 60 >/dev/null
	wait_until "the promoted standby to leave recovery" "$newport" "SELECT NOT pg_is_in_recovery()" 60
	echo promoted
	echo "$new" >"$st/primary"
	if [[ -n $oldlsn ]]; then
		lost=$(psql_at "$newport" "SELECT greatest(0, pg_wal_lsn_diff('$oldlsn', '$newlsn'))::bigint")
		echo "lost-wal-bytes $lost"
	fi
	# The old primary's data directory is thrown away, not rewound: in
	# async mode it has commits the new timeline never had.
	local t1 t2
	t1=$(now_ms)
	standby_from "$st/pg/$old" "$oldport" "$newport"
	t2=$(now_ms)
	wait_until "the new standby to stream" "$newport" "SELECT count(*) = 1 FROM pg_stat_replication WHERE state = 'streaming'" 60
	echo "node $new (port $newport) primary, node $old (port $oldport) streaming again, $(($(now_ms) - t0)) ms (kill and promote $((t1 - t0)) ms, base backup and start $((t2 - t1)) ms)" >&2
}

# ---------------------------------------------------------------------------
# pg_auto_failover (mode auto): a monitor on $port+2 and two keepers, each
# `pg_autoctl run` in a session of its own (its postgres runs in the
# keeper's process group). State in $st: keeper.a, keeper.b (process group
# ids), port.a, port.b, port.monitor.

autoctl() { # autoctl ST ARGS...: pg_autoctl as postgres, its config under ST
	local st=$1
	shift
	as_pg env XDG_CONFIG_HOME="$st/cfg" XDG_DATA_HOME="$st/data" PATH="$PGBIN:$PATH" pg_autoctl "$@"
}
# keeper_start ST NODE ARGS...: a keeper in its own session, detached from
# our stdout (fence-torture reads the hook's stdout until it closes).
keeper_start() {
	local st=$1 node=$2
	shift 2
	as_pg env XDG_CONFIG_HOME="$st/cfg" XDG_DATA_HOME="$st/data" PATH="$PGBIN:$PATH" \
		setsid pg_autoctl "$@" </dev/null >>"$st/keeper.$node.log" 2>&1 &
	local pid
	for _ in $(seq 100); do
		pid=$(pgrep -u postgres -f -- "pg_autoctl .*--pgdata $st/pg/$node( |\$)" | head -n1 || true)
		[[ -n $pid ]] && break
		sleep 0.05
	done
	[[ -n $pid ]] || { echo "pg-failover: the keeper of node $node did not start" >&2; return 1; }
	echo "$pid" >"$st/keeper.$node"
}
auto_healthy() { # both nodes settled as primary and secondary
	local mp
	mp=$(cat "$1/port.monitor")
	"$PGBIN/psql" -X -q -w -At -h 127.0.0.1 -p "$mp" -U postgres -d pg_auto_failover -c \
		"SELECT count(*) = 2 AND count(*) FILTER (WHERE reportedstate = 'primary') = 1 FROM pgautofailover.node WHERE reportedstate = goalstate AND reportedstate IN ('primary', 'secondary')" 2>/dev/null
}

# hook_auto: a crash failover under pg_auto_failover: kill -9 the primary's
# keeper and postgres together, let the monitor promote the secondary, then
# start the old node's keeper again, which rejoins it as a secondary.
hook_auto() {
	local st=$1 old new oldport newport t0 deadline
	if [[ $(psql_at "$(cat "$st/port.a")" "SELECT NOT pg_is_in_recovery()" 2>/dev/null) == t ]]; then old=a new=b; else old=b new=a; fi
	oldport=$(cat "$st/port.$old")
	newport=$(cat "$st/port.$new")
	t0=$(now_ms)
	local pg
	pg=$(cat "$st/keeper.$old")
	as_pg kill -KILL -- "-$pg" 2>/dev/null || true
	while as_pg kill -0 "$pg" 2>/dev/null || "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$oldport" -t 1; do sleep 0.02; done
	echo primary-lost
	wait_until "the monitor to promote node $new" "$newport" "SELECT NOT pg_is_in_recovery()" 120
	echo promoted
	echo "node $new (port $newport) promoted by the monitor, $(($(now_ms) - t0)) ms after the kill" >&2
	keeper_start "$st" "$old" run --pgdata "$st/pg/$old"
	deadline=$((SECONDS + 180))
	until [[ $(auto_healthy "$st") == t ]]; do
		((SECONDS < deadline)) || { echo "pg-failover: node $old did not rejoin as secondary" >&2; return 1; }
		sleep 0.2
	done
	echo "node $old (port $oldport) secondary again, $(($(now_ms) - t0)) ms after the kill" >&2
}

if [[ ${1:-} == hook ]]; then
	if [[ $(cat "${FENCE_PGFAIL_STATE:?}/mode") == auto ]]; then
		hook_auto "$FENCE_PGFAIL_STATE"
	else
		hook
	fi
	exit 0
fi

# ---------------------------------------------------------------------------
# The driver: per mode, a fresh primary and standby, fence-torture with the
# hook, checks on its summary, teardown.

modes=sync,async,control
duration=25s
clients=8
seed=$(date +%s)
work=
keep=0
raise=1
min_failovers=2
torture_bin=
ttl=150ms
port=${FENCE_PGFAIL_PORT:-5441}
while [[ $# -gt 0 ]]; do
	case $1 in
	--modes) modes=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	--clients) clients=$2; shift 2 ;;
	--ttl) ttl=$2; shift 2 ;;
	--seed) seed=$2; shift 2 ;;
	--dir) work=$2; shift 2 ;;
	--port) port=$2; shift 2 ;;
	--torture) torture_bin=$2; shift 2 ;;
	--no-raise) raise=0; shift ;;
	--min-failovers) min_failovers=$2; shift 2 ;;
	--keep) keep=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "pg-failover: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done

t_start=$(now_ms)
say() { local dt=$(($(now_ms) - t_start)); printf '[%3d.%03ds] %s\n' $((dt / 1000)) $((dt % 1000)) "$*"; }
fail_setup() { say "SETUP FAILED: $*" >&2; exit 2; }

if [[ ! -x $PGBIN/postgres || ! -x $PGBIN/pg_basebackup ]]; then
	if [[ ${CI:-} == true || ${FENCE_CI_PROVISION:-} == 1 ]]; then
		say "no PostgreSQL 15 server binaries in $PGBIN: apt-get install postgresql-15"
		if [[ $EUID -eq 0 ]]; then sudo=(); else sudo=(sudo -n); fi
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql-15 >/dev/null </dev/null ||
			fail_setup "apt-get install postgresql-15 failed"
	else
		fail_setup "no PostgreSQL 15 server binaries in $PGBIN (set PGBIN, apt-get install postgresql-15, or rerun with CI=true / FENCE_CI_PROVISION=1)"
	fi
fi
id postgres >/dev/null 2>&1 || fail_setup "no user postgres to run the scratch servers as"
as_pg true 2>/dev/null || fail_setup "cannot run commands as user postgres (need root, sudo -n, or to be postgres)"
for p in "$port" "$((port + 1))"; do
	if "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$p" -t 1; then
		fail_setup "something already answers on 127.0.0.1:$p; pass --port with a free pair of ports"
	fi
done

if [[ -z $work ]]; then
	work=$(mktemp -d "${TMPDIR:-/tmp}/fence-pgfail.XXXXXX")
else
	mkdir -p "$work"
	[[ -z $(ls -A "$work") ]] || fail_setup "--dir $work is not empty"
fi
work=$(cd "$work" && pwd)
chmod 755 "$work"

stop_servers() {
	local d k
	for k in "$work"/auto/keeper.a "$work"/auto/keeper.b "$work"/auto/keeper.monitor; do
		[[ -f $k ]] && as_pg kill -KILL -- "-$(cat "$k")" 2>/dev/null
	done
	for d in "$work"/cluster/pg/a "$work"/cluster/pg/b "$work"/auto/pg/a "$work"/auto/pg/b "$work"/auto/pg/monitor; do
		[[ -f $d/postmaster.pid ]] && pg_kill "$d"
	done
	return 0
}
cleanup() {
	local rc=$?
	stop_servers
	if ((keep == 0)); then
		as_pg rm -rf "$work"/cluster/pg "$work"/auto/pg "$work"/auto/cfg "$work"/auto/data 2>/dev/null || true
		rm -rf "$work"
	else
		say "kept $work"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z $torture_bin ]]; then
	say "building fence-torture from $here"
	(cd "$here" && go build -o "$work/fence-torture" ./cmd/fence-torture) || fail_setup "go build ./cmd/fence-torture failed"
	torture_bin=$work/fence-torture
fi
[[ -x $torture_bin ]] || fail_setup "fence-torture binary $torture_bin is not executable"
self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

# cluster DIR: initdb node a as primary on $port, node b as its standby on
# $port+1. The modes run one after the other on this one pair.
cluster() {
	local st=$1
	mkdir -p "$st/pg"
	if [[ $EUID -eq 0 ]]; then chown postgres: "$st/pg"; else chmod 777 "$st/pg"; fi
	echo "$port" >"$st/port.a"
	echo "$((port + 1))" >"$st/port.b"
	echo a >"$st/primary"
	as_pg "$PGBIN/initdb" -D "$st/pg/a" -U postgres -A trust --no-sync >"$st/initdb.log" 2>&1 ||
		{ cat "$st/initdb.log" >&2; fail_setup "initdb failed"; }
	# In postgresql.conf, so that every pg_basebackup copy has the same.
	# fsync off: the host never crashes here, only the servers do (kill -9),
	# and what they wrote is in the page cache.
	as_pg tee -a "$st/pg/a/postgresql.conf" >/dev/null <<-EOF
		listen_addresses = '127.0.0.1'
		unix_socket_directories = '$st/pg'
		fsync = off
		synchronous_commit = on
		wal_level = replica
		max_wal_senders = 10
		hot_standby = on
		wal_receiver_status_interval = 1s
		max_connections = 200
	EOF
	pg_start "$st/pg/a" "$port" || fail_setup "could not start the primary"
	standby_from "$st/pg/b" "$((port + 1))" "$port" || fail_setup "could not make the standby"
	wait_until "the standby to stream" "$port" "SELECT count(*) = 1 FROM pg_stat_replication WHERE state = 'streaming'" 60 ||
		fail_setup "the standby never streamed"
}

# cluster_auto DIR: a pg_auto_failover formation: monitor on $port+2, node
# a (first, so primary) on $port, node b on $port+1. The monitor's health
# checks are tightened from its defaults (5 s checks, 20 s before a node is
# unhealthy, 30 s demote timeout) to about a second each, so that a crash
# failover takes seconds and a short run has several.
cluster_auto() {
	local st=$1 mport=$((port + 2)) node p uri
	mkdir -p "$st/pg"
	if [[ $EUID -eq 0 ]]; then chown postgres: "$st" "$st/pg"; else chmod 777 "$st" "$st/pg"; fi
	echo "$port" >"$st/port.a"
	echo "$((port + 1))" >"$st/port.b"
	echo "$mport" >"$st/port.monitor"
	echo auto >"$st/mode"
	"$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$mport" -t 1 && fail_setup "something already answers on 127.0.0.1:$mport (the monitor's port)"
	autoctl "$st" create monitor --pgctl "$PGBIN/pg_ctl" --pgdata "$st/pg/monitor" --pgport "$mport" --hostname 127.0.0.1 \
		--auth trust --no-ssl >"$st/create-monitor.log" 2>&1 || { tail -n 20 "$st/create-monitor.log" >&2; fail_setup "pg_autoctl create monitor failed"; }
	keeper_start "$st" monitor run --pgdata "$st/pg/monitor" || fail_setup "the monitor's keeper did not start"
	wait_until "the monitor" "$mport" "SELECT true" 60 || fail_setup "the monitor never answered"
	for p in "health_check_period = 1000" "health_check_timeout = 1000" "health_check_max_retries = 1" \
		"health_check_retry_delay = 500" "node_considered_unhealthy_timeout = 2000" "primary_demote_timeout = 2000"; do
		psql_at "$mport" "ALTER SYSTEM SET pgautofailover.$p" >/dev/null || fail_setup "ALTER SYSTEM SET pgautofailover.$p failed"
	done
	psql_at "$mport" "SELECT pg_reload_conf()" >/dev/null
	uri="postgres://autoctl_node@127.0.0.1:$mport/pg_auto_failover?sslmode=disable"
	for node in a b; do
		keeper_start "$st" "$node" create postgres --pgctl "$PGBIN/pg_ctl" --pgdata "$st/pg/$node" --pgport "$(cat "$st/port.$node")" \
			--hostname 127.0.0.1 --listen 127.0.0.1 --name "node_$node" --monitor "$uri" --auth trust --no-ssl --dbname postgres --run ||
			fail_setup "pg_autoctl create postgres (node $node) did not start"
		if [[ $node == a ]]; then
			wait_until "node a to be primary" "$port" "SELECT NOT pg_is_in_recovery()" 120 || fail_setup "node a never came up as primary"
		fi
	done
	local deadline=$((SECONDS + 180))
	until [[ $(auto_healthy "$st") == t ]]; do
		((SECONDS < deadline)) || { tail -n 20 "$st/keeper.b.log" >&2; fail_setup "the formation never settled (primary + secondary)"; }
		sleep 0.2
	done
	say "auto: pg_auto_failover $(autoctl "$st" --version 2>/dev/null | head -n1 | awk '{print $3}'): monitor 127.0.0.1:$mport, primary 127.0.0.1:$port, secondary 127.0.0.1:$((port + 1)), synchronous_standby_names = '$(psql_at "$port" "SHOW synchronous_standby_names")'"
}

# set_mode DIR MODE: synchronous_standby_names on both servers (ALTER SYSTEM
# works on a standby too, and pg_basebackup copies it to every rebuilt one).
set_mode() {
	local st=$1 mode=$2 names="''" p primary
	[[ $mode == sync ]] && names="'*'"
	for p in "$port" "$((port + 1))"; do
		psql_at "$p" "ALTER SYSTEM SET synchronous_standby_names = $names" >/dev/null || fail_setup "ALTER SYSTEM on port $p failed"
		psql_at "$p" "SELECT pg_reload_conf()" >/dev/null
	done
	if [[ $mode == sync ]]; then echo sync >"$st/mode"; else echo async >"$st/mode"; fi
	primary=$(cat "$st/port.$(cat "$st/primary")")
	local want=async
	[[ $mode == sync ]] && want=sync
	wait_until "the standby to be $want" "$primary" "SELECT count(*) = 1 FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = '$want'" 30 ||
		fail_setup "the standby did not become $want"
	say "$mode: primary 127.0.0.1:$primary, standby streaming ($want), synchronous_standby_names = $names"
}

dsn="postgres://postgres@127.0.0.1:${port},127.0.0.1:$((port + 1))/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
failed=0
plain_up=0
for mode in ${modes//,/ }; do
	extra=()
	if [[ $mode == auto ]]; then
		if ((plain_up)); then
			stop_servers
			plain_up=0
		fi
		st=$work/auto
		command -v pg_autoctl >/dev/null 2>&1 || {
			if [[ ${CI:-} == true || ${FENCE_CI_PROVISION:-} == 1 ]]; then
				say "pg_autoctl not installed: apt-get install postgresql-15-auto-failover"
				if [[ $EUID -eq 0 ]]; then sudo=(); else sudo=(sudo -n); fi
				"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql-15-auto-failover >/dev/null </dev/null ||
					fail_setup "apt-get install postgresql-15-auto-failover failed"
			else
				fail_setup "mode auto needs pg_autoctl (apt-get install postgresql-15-auto-failover, or rerun with CI=true / FENCE_CI_PROVISION=1)"
			fi
		}
		cluster_auto "$st"
	elif ((plain_up == 0)); then
		st=$work/cluster
		cluster "$st"
		plain_up=1
	fi
	case $mode in
	sync) ;;
	async) extra=(--failover-lossy); ((raise == 0)) || extra+=(--raise-after-failover) ;;
	control) extra=(--failover-lossy --old-fence-rule) ;;
	auto) ;;
	*) fail_setup "unknown mode $mode (want sync, async, control, auto)" ;;
	esac
	[[ $mode == auto ]] || set_mode "$st" "$mode"
	say "$mode: fence-torture --duration $duration --clients $clients --ttl $ttl --seed $seed --faults pause,skew,cancel ${extra[*]}"
	rc=0
	FENCE_PGFAIL_STATE=$st "$torture_bin" --dsn "$dsn" --duration "$duration" --clients "$clients" --ttl "$ttl" --window 2s --seed "$seed" \
		--faults pause,skew,cancel --check-timeout 20s --out "$st/$mode.out" --failover-cmd "bash $self hook" "${extra[@]}" \
		>"$st/$mode.txt" 2>"$st/$mode.err" || rc=$?
	sed 's/^/    /' "$st/$mode.txt"
	grep 'failover:' "$st/$mode.err" | sed 's/^/    /' || true
	last=$(tail -n 1 "$st/$mode.txt")
	n=$(sed -n 's/^  failover: *\([0-9]*\) .*/\1/p' "$st/$mode.txt")
	problems=()
	if [[ $mode == control ]]; then
		grep -Eq '^  violations by check: .*external: fence reused' "$st/$mode.txt" ||
			problems+=("the old fence rule was not caught handing out a fence twice (exit $rc, '$last'): the async check cannot fail")
	else
		[[ $rc -eq 0 && $last == "violations: 0" ]] || problems+=("fence-torture exit $rc, '$last'")
	fi
	((${n:-0} >= min_failovers)) || problems+=("only ${n:-0} failovers (want $min_failovers or more: run longer)")
	if [[ $mode != sync && $mode != auto ]] && ! grep -Eq '^  WAL bytes the promoted standby never received: .*\b[1-9]' "$st/$mode.txt"; then
		problems+=("no failover lost any WAL, so the floor was not put to the test")
	fi
	if ((${#problems[@]} > 0)); then
		for p in "${problems[@]}"; do say "$mode: NOT AS EXPECTED: $p" >&2; done
		tail -n 5 "$st/$mode.err" >&2
		failed=1
		keep=1
	else
		say "$mode: as expected"
	fi
done
if ((failed)); then
	say "FAIL ($(awk "BEGIN{print $(($(now_ms) - t_start))/1000}") s; seed $seed)" >&2
	exit 1
fi
say "ok ($(awk "BEGIN{print $(($(now_ms) - t_start))/1000}") s; seed $seed)"
