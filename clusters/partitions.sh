#!/usr/bin/env bash
# clusters/partitions.sh — a cluster whose nodes each run in a network
# namespace of their own, on a bridge, and fence-torture against it with
# the partition nemesis (internal/nemesis; docs/CLUSTERS.md "Partitions"):
# majority/minority splits, a node isolated from its peers but not its
# clients, a bridge, one-way cuts, and flapping cuts shorter and longer
# than the lease TTL and the failover timeout, drawn from the torture's
# seed, written to OUT/nemesis.json and always healed at the end. The
# clients and the harness stay in the root namespace (on the bridge) and
# reach every node on both sides of every cut.
#
#   partitions.sh galera DURATION [fence-torture flags...]
#
# galera: 3 MariaDB Galera nodes (clusters/galera/galera.sh in namespace
# mode), clients over the three, the nemesis combined with the process
# faults: node 3 SIGKILLed a third into each fenced run and rejoined, as a
# step of the nemesis's own schedule (--nemesis-kill 3: only when the
# cluster is whole, and no cut while node 3 is down or rejoining), the
# apply lag on node 2 of clusters/galera/torture.sh, and the torture's own
# (pause, skew, cancel). Node 1 (the harness's, whose binary log orders
# the checks) is never left in a minority: not by a drawn cut, nor by a cut
# combined with the kill (issue 31: node 3 killed by torture.sh while the
# nemesis had node 2 cut off left node 1 alone, non-Primary), nor by a cut
# of node 1's only synced peer while the third node is dead or rejoining
# (a node that died on its own is restarted by the nemesis). Pass
# --galera-old-guard (with NODE_KILL=0) for the control, which must be
# caught.
#
# Environment:
#   PARTITIONS_DIR    scratch directory (default: mktemp); kept on failure
#   NEMESIS_PREFIX    namespace prefix (default fn), NEMESIS_SUBNET (default
#                     10.77.0): must be free on this machine
#   NEMESIS_FAULTS    fault kinds (default all)
#   FENCE_GALERA_PROVIDER_OPTIONS  default: evs timeouts of 2-3 s so that a
#                     cut-off node leaves the primary component (and a
#                     healed one comes back) within seconds, not 15+
#   NEMESIS_FAILOVER_TIMEOUT  what the schedule draws around (default 3s)
#   FAULT_SETS        space-separated fault sets, one fenced run of DURATION
#                     each (default: NEMESIS_FAULTS), e.g. "split isolate
#                     bridge oneway flap-short flap-long all"
#   CONTROL           a duration: then after each fenced run also run the
#                     control (the old guard, --galera-old-guard) under the
#                     same fault set; it must report violations
#   NODE_KILL         1 (default): fenced runs kill node 3 (in the
#                     nemesis's schedule); 0: no kill
#   LAG_SECONDS       as clusters/galera/torture.sh
#   PARTITIONS_DEADLINE  a time (date -d syntax, e.g. 03:10): a run that
#                     would not end by then (DURATION plus 3 min for setup
#                     and the cluster's repair) is not started
# Needs root (ip netns). Exit status: fence-torture's (0: violations 0).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CLUSTER=${1:?usage: partitions.sh galera DURATION [fence-torture flags...]}
DURATION=${2:?usage: partitions.sh galera DURATION [fence-torture flags...]}
shift 2
PREFIX=${NEMESIS_PREFIX:-fn}
SUBNET=${NEMESIS_SUBNET:-10.77.0}
FAULTS=${NEMESIS_FAULTS:-all}
FO=${NEMESIS_FAILOVER_TIMEOUT:-3s}
[[ $CLUSTER == galera ]] || { echo "partitions.sh: cluster must be galera, got ${CLUSTER}" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "partitions.sh: needs root (ip netns)" >&2; exit 2; }

log() { printf '[partitions %s] %s\n' "$(date +%T)" "$*" >&2; }

dir=${PARTITIONS_DIR:-$(mktemp -d)}
mkdir -p "$dir/out"
chmod 755 "$dir" # the servers run as user mysql
go build -o "$dir/fence-torture" ./cmd/fence-torture
go build -o "$dir/fence-nemesis" ./cmd/fence-nemesis
nem() { "$dir/fence-nemesis" "$1" --prefix "$PREFIX" --nodes 3 --subnet "$SUBNET"; }

export FENCE_GALERA_DIR="$dir/cluster"
export FENCE_GALERA_NETNS="${PREFIX}:${SUBNET}"
export FENCE_GALERA_PROVIDER_OPTIONS=${FENCE_GALERA_PROVIDER_OPTIONS:-evs.keepalive_period=PT0.5S;evs.inactive_check_period=PT0.5S;evs.suspect_timeout=PT2S;evs.inactive_timeout=PT3S;evs.install_timeout=PT3S;evs.join_retrans_period=PT0.5S}

rc=0
cleanup() {
	# Every cut healed, every node stopped, the namespaces and bridge gone,
	# whatever happened.
	nem heal >/dev/null 2>&1 || true
	bash clusters/galera/galera.sh stop >/dev/null 2>&1 || true
	nem down || log "could not remove the namespaces ${PREFIX}1-3 (ip netns list)"
	if [[ $rc -eq 0 && -z "${PARTITIONS_DIR:-}" ]]; then
		rm -rf "$dir"
	else
		log "kept ${dir} (histories and the nemesis schedule in ${dir}/out)"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "namespaces ${PREFIX}1-3 on ${SUBNET}.0/24 (bridge ${PREFIX}br, clients at ${SUBNET}.254)"
nem up
t0=$SECONDS
bash clusters/galera/galera.sh start
log "cluster up in $((SECONDS - t0)) s"
# One fenced run per fault set (FAULT_SETS, space-separated; each a
# --nemesis-faults list), each followed by the control under the same
# faults if CONTROL is set. Before every run the cluster is made whole
# again (galera.sh ensure: every node Synced and Primary, a node left
# non-Primary or dead by the previous run restarted, or a fresh cluster):
# a node that had not rejoined made the next run fail at setup.
table=()
i=0
ensure() {
	local t=$SECONDS
	bash clusters/galera/galera.sh ensure || {
		log "the cluster could not be made whole before $1"
		return 1
	}
	log "cluster whole before $1 ($((SECONDS - t)) s)"
}
# summary FILE: the run's figures on one line.
summary() {
	local f=$1
	printf '%s, %s; %s; %s; %s; %s' "$(grep -E '^  ops:' "$f" | tr -s ' ')" "$(grep -E '^violations: ' "$f" | tail -n 1)" \
		"$(grep -E '^  stale commits' "$f" | sed 's/^ *//')" "$(grep -E '^  faults injected' "$f" | sed 's/^ *//')" \
		"$(grep -E '^cluster faults' "$f")" "$(grep -E '^  nemesis pauses' "$f" | sed 's/^ *//')"
}
# Before each cut the nemesis asks which nodes run and which are synced
# (galera.sh members): a node that died on its own is restarted (a Galera
# joiner aborts when its donor is cut away: "State transfer cannot be
# completed, need to abort"), and no cut leaves node 1 with no synced peer.
G="bash $PWD/clusters/galera/galera.sh"
guard=(--nemesis-members-cmd "$G members" --nemesis-rejoin-cmd "$G rejoin")
# fits SECS: a run of SECS (plus 3 min of setup and repair) ends before
# PARTITIONS_DEADLINE.
fits() {
	[[ -n "${PARTITIONS_DEADLINE:-}" ]] || return 0
	local dl
	dl=$(date -d "$PARTITIONS_DEADLINE" +%s) || return 0
	(($(date +%s) + $1 + 180 <= dl))
}
for set in ${FAULT_SETS:-$FAULTS}; do
	i=$((i + 1))
	mkdir -p "$dir/out/$i"
	r=0
	fits "${DURATION%s}" || { log "deadline ${PARTITIONS_DEADLINE}: fenced run ${i} (${set}) not started"; table+=("fenced  ${set}: not run (deadline)"); continue; }
	ensure "fenced run ${i}" || { rc=1; table+=("fenced  ${set}: cluster not whole, not run"); continue; }
	log "fenced run ${i}: nemesis ${set}, ${DURATION}"
	kill3=()
	((${NODE_KILL:-1})) && kill3=(--nemesis-kill 3 --nemesis-kill-cmd "$G kill" --nemesis-whole-cmd "$G whole")
	for attempt in 1 2; do
		r=0
		t=$SECONDS
		NODE_KILL=0 FENCE_TORTURE_BIN="$dir/fence-torture" bash clusters/galera/torture.sh "$DURATION" \
			--nemesis "${PREFIX}:3:${SUBNET}" --nemesis-faults "$set" --nemesis-keep 1 "${guard[@]}" "${kill3[@]}" \
			--nemesis-failover-timeout "$FO" --out "$dir/out/$i" "$@" >"$dir/run$i.txt" 2>"$dir/run$i.err" || r=$?
		# A run that failed at its setup (no history: e.g. the harness's
		# handle on node 3 timing out on a lock while the node caught up,
		# seen in the hour's bridge run) is tried once more, said so.
		((attempt == 1 && r == 2 && SECONDS - t < 90)) && grep -q '^violations: unknown (the run failed)' "$dir/run$i.txt" || break
		log "fenced run ${i} failed at setup: $(grep -E '^fence-torture: torture:' "$dir/run$i.err" | tail -n 1 | cut -c1-200); once more"
		cp "$dir/run$i.err" "$dir/run$i.setup-failed.err"
		ensure "fenced run ${i}, again" || break
	done
	cat "$dir/run$i.txt"
	v=$(grep -E '^violations: ' "$dir/run$i.txt" | tail -n 1)
	table+=("fenced  ${set}: exit ${r}, $(summary "$dir/run$i.txt")")
	[[ $r -eq 0 && "$v" == "violations: 0" ]] || rc=1
	[[ -n "${CONTROL:-}" ]] || continue
	# The control: the old single-statement guard under the same nemesis
	# (node 3 not killed, as in CI's Galera control): it must be caught.
	mkdir -p "$dir/out/control$i"
	r=0
	fits "${CONTROL%s}" || { log "deadline ${PARTITIONS_DEADLINE}: control ${i} (${set}) not started"; table+=("control ${set}: not run (deadline)"); continue; }
	ensure "control ${i}" || { rc=1; table+=("control ${set}: cluster not whole, not run"); continue; }
	log "control ${i}: --galera-old-guard, nemesis ${set}, ${CONTROL}"
	NODE_KILL=0 FENCE_TORTURE_BIN="$dir/fence-torture" bash clusters/galera/torture.sh "$CONTROL" --galera-old-guard \
		--nemesis "${PREFIX}:3:${SUBNET}" --nemesis-faults "$set" --nemesis-keep 1 "${guard[@]}" \
		--nemesis-failover-timeout "$FO" --out "$dir/out/control$i" --check-timeout 3s "$@" >"$dir/control$i.txt" 2>"$dir/control$i.err" || r=$?
	grep -E '^  (ops:|faults injected|stale commits|violations by check)|^violations|^cluster faults' "$dir/control$i.txt" || true
	v=$(grep -E '^violations: ' "$dir/control$i.txt" | tail -n 1)
	table+=("control ${set}: exit ${r}, $(summary "$dir/control$i.txt")")
	if [[ $r -ne 1 || ! "$v" =~ ^violations:\ [1-9] ]]; then
		log "the control was NOT caught under ${set} (exit ${r}, '${v}'): the torture cannot fail under these partitions"
		tail -n 5 "$dir/control$i.err" >&2 || true
		rc=1
	fi
done
log "cuts left in place: $(nem drops | wc -l)"
printf 'partitions: %s\n' "${table[@]}"
exit "$rc"
