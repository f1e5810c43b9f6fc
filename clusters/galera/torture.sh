#!/usr/bin/env bash
# clusters/galera/torture.sh — fence-torture with its clients spread over the
# three nodes of the cluster galera.sh started, with cluster faults injected
# from outside while it runs (docs/CLUSTERS.md):
#
#   - apply lag on node 2, every few seconds for LAG_SECONDS: a session on
#     node 2 that does not replicate (wsrep_on=OFF) holds a row lock that a
#     replicated write from node 1 then needs, so node 2's single applier
#     stops behind it (and flow control soon slows the whole cluster);
#   - node 3 SIGKILLed a third into the run and rejoined (IST) later: its
#     clients fail, then reconnect to it.
#
# The harness (setup, barriers) uses node 1, which no fault touches. Every
# DSN carries wsrep_sync_wait=7: the model checks reads, which are
# linearizable across nodes only then. The torture's own fault set is the
# client-side one (pause, skew, cancel).
#
#   torture.sh DURATION [extra fence-torture flags...]
# Environment: FENCE_GALERA_DIR (as galera.sh), FENCE_TORTURE_BIN (default:
# go build ./cmd/fence-torture), LAG_SECONDS (default 2), NODE_KILL (default
# 1; 0 leaves node 3 alone, e.g. for the --galera-old-guard control, which
# needs only the apply lag and concurrent takeovers, and under the partition
# nemesis, which kills node 3 itself as a step of its schedule so that no
# cut is held while the node is down: clusters/partitions.sh). Prints the
# torture's summary, then the faults injected; exits with the torture's
# status (0: violations 0).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
DURATION=${1:?usage: torture.sh DURATION [fence-torture flags...]}
shift
LAG=${LAG_SECONDS:-2}
NODE_KILL=${NODE_KILL:-1}
G=clusters/galera/galera.sh
secs=${DURATION%s}
[[ "$secs" =~ ^[0-9]+$ ]] || { echo "torture.sh: DURATION must be whole seconds (e.g. 60s), got $DURATION" >&2; exit 2; }

bin=${FENCE_TORTURE_BIN:-}
if [[ -z "$bin" ]]; then
	bin=$(mktemp -d)/fence-torture
	go build -o "$bin" ./cmd/fence-torture
fi
sw='?wsrep_sync_wait=7'
IFS=, read -r d1 d2 d3 <<<"$(bash $G dsns)"
clients="${d1}${sw},${d2}${sw},${d3}${sw}"

bash $G sql 1 "CREATE TABLE IF NOT EXISTS fence.torture_lag (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB; INSERT IGNORE INTO fence.torture_lag VALUES (1, 0)"

out=$(mktemp)
"$bin" --dsn "${d1}${sw}" --client-dsns "$clients" --duration "$DURATION" --faults pause,skew,cancel "$@" >"$out" 2>"${out}.err" &
tpid=$!

lags=0 kills=0 rejoins=0
start=$SECONDS
killed=0
((NODE_KILL)) || killed=2
while kill -0 "$tpid" 2>/dev/null; do
	t=$((SECONDS - start))
	if ((killed == 0 && t >= secs / 3)); then
		bash $G kill 3 2>/dev/null && kills=$((kills + 1))
		killed=1
	elif ((killed == 1 && t >= secs / 3 + 5)); then
		bash $G rejoin 3 2>/dev/null && rejoins=$((rejoins + 1))
		killed=2
	elif ((t + LAG + 1 < secs)); then
		bash $G sql 2 "SET SESSION wsrep_on=OFF; BEGIN; SELECT n FROM fence.torture_lag WHERE id = 1 FOR UPDATE; DO SLEEP(${LAG}); ROLLBACK" >/dev/null 2>&1 &
		lp=$!
		sleep 0.3
		bash $G sql 1 "UPDATE fence.torture_lag SET n = n + 1 WHERE id = 1" >/dev/null 2>&1 && lags=$((lags + 1))
		wait "$lp" || true
	fi
	sleep 1
done
rc=0
wait "$tpid" || rc=$?
((killed == 1)) && bash $G rejoin 3 >/dev/null 2>&1 && rejoins=$((rejoins + 1))
cat "$out"
if ((NODE_KILL)); then
	echo "cluster faults injected: apply lag on node 2 ${lags} x ${LAG}s, node 3 SIGKILLed ${kills}, rejoined ${rejoins}"
else
	echo "cluster faults injected: apply lag on node 2 ${lags} x ${LAG}s, node 3 not killed by torture.sh (NODE_KILL=0)"
fi
tail -n 3 "${out}.err" >&2 || true
rm -f "$out" "${out}.err"
exit "$rc"
