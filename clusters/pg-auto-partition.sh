#!/usr/bin/env bash
# clusters/pg-auto-partition.sh — a pg_auto_failover formation whose three
# members each run in a network namespace of their own (made by the
# partition nemesis, internal/nemesis: PREFIX1-3 on SUBNET.0/24, the root
# namespace at SUBNET.254), for TestPGAutoFailoverPartition (issue 31):
#
#   node a  PREFIX1, SUBNET.1:5471   the first primary
#   node b  PREFIX2, SUBNET.2:5472   its synchronous secondary
#   monitor PREFIX3, SUBNET.3:5473
# (ports of their own although the addresses differ: the servers' Unix
# sockets share /var/run/postgresql with the system server's 5432)
#
#   pg-auto-partition.sh up DIR PREFIX SUBNET     create and start it, wait
#                                                 until a is primary and b
#                                                 secondary
#   pg-auto-partition.sh down DIR                 stop every keeper and server
#   pg-auto-partition.sh state DIR                the monitor's view, one
#                                                 line per node
#
# The settings are docs/CLUSTERS.md's for fence ("pg_auto_failover under a
# partition"):
#   - replication quorum on (pg_auto_failover's default with two data
#     nodes: synchronous_standby_names names the secondary), so a primary
#     cut off from its secondary acknowledges no commit;
#   - the monitor's health checks tightened (1 s checks, a node unhealthy
#     after 2 s, primary_demote_timeout 2 s) so that it promotes the
#     secondary seconds after the primary is cut off;
#   - each keeper's timeout.network_partition_timeout 3 s (default 20 s):
#     a primary that sees neither the monitor nor a standby stops its
#     postgres after it, which ends the split brain on its side;
#   - clients (SUBNET.254) may connect to every node; replication between
#     the nodes is pg_auto_failover's own.
# Needs root (ip netns exec, runuser) and postgresql-15-auto-failover.
set -euo pipefail
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
cmd=${1:?usage: pg-auto-partition.sh up DIR PREFIX SUBNET | down DIR | state DIR}
DIR=${2:?usage: pg-auto-partition.sh up DIR PREFIX SUBNET | down DIR | state DIR}

log() { printf '[pg-auto %s] %s\n' "$(date +%T)" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

# in_ns NS ARGS...: ARGS as postgres in namespace NS, pg_autoctl's config
# and state under DIR.
in_ns() {
	local ns=$1
	shift
	ip netns exec "$ns" runuser -u postgres -- env XDG_CONFIG_HOME="$DIR/cfg" XDG_DATA_HOME="$DIR/data" \
		PATH="$PGBIN:$PATH" "$@"
}

# keeper NS NODE ARGS...: pg_autoctl ARGS in its own session in NS, its
# output in DIR/keeper.NODE.log; its process group id in DIR/keeper.NODE.
keeper() {
	local ns=$1 node=$2 pid
	shift 2
	in_ns "$ns" setsid pg_autoctl "$@" </dev/null >>"$DIR/keeper.$node.log" 2>&1 &
	for _ in $(seq 200); do
		pid=$(pgrep -u postgres -f -- "pg_autoctl .*--pgdata $DIR/pg/$node( |\$)" | head -n1 || true)
		[[ -n $pid ]] && break
		sleep 0.05
	done
	[[ -n $pid ]] || die "the keeper of ${node} did not start (${DIR}/keeper.${node}.log)"
	echo "$pid" >"$DIR/keeper.$node"
}

port_of() { echo $((5470 + ${1##*.})); } # port_of ADDR: the port of SUBNET.N
psql_at() { # psql_at ADDR SQL [DB]: one value
	"$PGBIN/psql" -X -q -w -At -h "$1" -p "$(port_of "$1")" -U postgres -d "${3:-postgres}" -c "$2"
}

wait_until() { # wait_until WHAT SECS CMD...
	local what=$1 secs=$2 deadline
	shift 2
	deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "timed out after ${secs}s waiting for ${what}"
		sleep 0.2
	done
}

settled() { # a primary and a secondary, each in the state the monitor asked for
	[[ $(psql_at "$SUBNET.3" "SELECT count(*) = 2 AND count(*) FILTER (WHERE reportedstate = 'primary') = 1 FROM pgautofailover.node WHERE reportedstate = goalstate AND reportedstate IN ('primary', 'secondary')" pg_auto_failover) == t ]]
}

case $cmd in
up)
	PREFIX=${3:?PREFIX}
	SUBNET=${4:?SUBNET}
	command -v pg_autoctl >/dev/null || die "pg_autoctl not installed (apt-get install postgresql-15-auto-failover)"
	mkdir -p "$DIR/pg"
	chmod 755 "$DIR"
	chown postgres: "$DIR" "$DIR/pg"
	echo "$SUBNET" >"$DIR/subnet"
	log "monitor in ${PREFIX}3 (${SUBNET}.3)"
	in_ns "${PREFIX}3" pg_autoctl create monitor --pgctl "$PGBIN/pg_ctl" --pgdata "$DIR/pg/monitor" --pgport 5473 \
		--hostname "$SUBNET.3" --auth trust --no-ssl >"$DIR/create-monitor.log" 2>&1 ||
		{
			tail -n 20 "$DIR/create-monitor.log" >&2
			die "pg_autoctl create monitor failed"
		}
	printf '\nhost all all %s.0/24 trust\n' "$SUBNET" >>"$DIR/pg/monitor/pg_hba.conf"
	keeper "${PREFIX}3" monitor run --pgdata "$DIR/pg/monitor"
	# Reloaded until it answers here: the server create started may still
	# run with the file as it was.
	monitor_up() {
		in_ns "${PREFIX}3" pg_ctl -D "$DIR/pg/monitor" reload >/dev/null 2>&1 || true
		psql_at "$SUBNET.3" "SELECT true"
	}
	wait_until "the monitor" 60 monitor_up
	for p in "health_check_period = 1000" "health_check_timeout = 1000" "health_check_max_retries = 1" \
		"health_check_retry_delay = 500" "node_considered_unhealthy_timeout = 2000" "primary_demote_timeout = 2000"; do
		psql_at "$SUBNET.3" "ALTER SYSTEM SET pgautofailover.$p" >/dev/null
	done
	psql_at "$SUBNET.3" "SELECT pg_reload_conf()" >/dev/null
	uri="postgres://autoctl_node@$SUBNET.3:5473/pg_auto_failover?sslmode=disable"
	i=0
	for node in a b; do
		i=$((i + 1))
		log "node ${node} in ${PREFIX}${i} (${SUBNET}.${i})"
		keeper "${PREFIX}${i}" "$node" create postgres --pgctl "$PGBIN/pg_ctl" --pgdata "$DIR/pg/$node" --pgport $((5470 + i)) \
			--hostname "$SUBNET.$i" --listen "$SUBNET.$i" --name "node_$node" --monitor "$uri" --auth trust --no-ssl \
			--dbname postgres --run
		if [[ $node == a ]]; then
			# The clients' address (node b copies this file in its base
			# backup), allowed once the server is up; asked over its socket,
			# as the clients may not connect before.
			local_a() { in_ns "${PREFIX}1" psql -X -q -w -At -h /var/run/postgresql -p 5471 -d postgres -c "$1"; }
			wait_until "node a's server" 120 local_a "SELECT true"
			printf '\nhost all all %s.0/24 trust\nhost replication all %s.0/24 trust\n' "$SUBNET" "$SUBNET" >>"$DIR/pg/a/pg_hba.conf"
			local_a "SELECT pg_reload_conf()" >/dev/null
			wait_until "node a to be primary" 120 test "$(psql_at "$SUBNET.1" "SELECT NOT pg_is_in_recovery()" 2>/dev/null)" == t
		fi
	done
	wait_until "the formation to settle (primary + secondary)" 180 settled
	# Node b's pg_hba.conf is pg_auto_failover's own (not a's copy): the
	# clients' address there too.
	printf '\nhost all all %s.0/24 trust\n' "$SUBNET" >>"$DIR/pg/b/pg_hba.conf"
	in_ns "${PREFIX}2" psql -X -q -w -At -h /var/run/postgresql -p 5472 -d postgres -c "SELECT pg_reload_conf()" >/dev/null
	wait_until "node b to let the clients in" 30 psql_at "$SUBNET.2" "SELECT true"
	# The keepers read their configuration at start: set, then restart them.
	for node in a b; do
		in_ns "${PREFIX}1" pg_autoctl config set --pgdata "$DIR/pg/$node" timeout.network_partition_timeout 3 >/dev/null
		in_ns "${PREFIX}1" pg_autoctl reload --pgdata "$DIR/pg/$node" >/dev/null 2>&1 || true
	done
	log "up: a primary, b secondary; synchronous_standby_names on a = '$(psql_at "$SUBNET.1" "SHOW synchronous_standby_names")'; network_partition_timeout $(in_ns "${PREFIX}1" pg_autoctl config get --pgdata "$DIR/pg/a" timeout.network_partition_timeout) s"
	;;
down)
	for node in a b monitor; do
		[[ -s "$DIR/keeper.$node" ]] || continue
		pg=$(cat "$DIR/keeper.$node")
		kill -TERM -- "-$pg" 2>/dev/null || true
	done
	for node in a b monitor; do
		[[ -s "$DIR/keeper.$node" ]] || continue
		pg=$(cat "$DIR/keeper.$node")
		for _ in $(seq 100); do kill -0 -- "-$pg" 2>/dev/null || break; sleep 0.1; done
		kill -KILL -- "-$pg" 2>/dev/null || true
	done
	for node in a b monitor; do
		[[ -d "$DIR/pg/$node" ]] && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DIR/pg/$node" -m immediate stop >/dev/null 2>&1 || true
	done
	;;
state)
	SUBNET=$(cat "$DIR/subnet")
	psql_at "$SUBNET.3" "SELECT nodename || ' ' || reportedstate || '/' || goalstate FROM pgautofailover.node ORDER BY nodeid" pg_auto_failover
	;;
*) die "usage: pg-auto-partition.sh up DIR PREFIX SUBNET | down DIR | state DIR" ;;
esac
