#!/usr/bin/env bash
# proof/check.sh: model-check proof/lease.pml with spin (see proof/README.md).
#
# Every run is a full state-space search. The fenced design must hold
# (errors: 0, search complete, depth limit never reached). Each naive design
# must violate the property it is named for; its counterexample is replayed
# with `spin -t` and printed. Exit status 0 only if every run turned out as
# expected. Needs spin and a C compiler (cc, or $CC).
#
#   bash proof/check.sh            all runs
#   KEEP=1 bash proof/check.sh     keep the work directory (trails, pan.c)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CC=${CC:-cc}
DEPTH=${SPIN_DEPTH:-100000}

command -v spin >/dev/null 2>&1 || { echo "check.sh: spin not found (Debian: apt-get install spin)" >&2; exit 2; }
command -v "$CC" >/dev/null 2>&1 || { echo "check.sh: C compiler '$CC' not found" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/fence-spin.XXXXXX")
if [[ "${KEEP:-}" == 1 ]]; then
	echo "work directory: $work"
else
	trap 'rm -rf "$work"' EXIT
fi
cp "$here/lease.pml" "$work/"
cd "$work"

now_ms() { local t=${EPOCHREALTIME//[!0-9]/}; echo $((10#$t / 1000)); }

failures=0
total_start=$(now_ms)

# run NAME EXPECT CLAIM SPIN_DEFINES [PAN_CFLAGS]
#   EXPECT: hold (no error, complete search) or fail (claim violated).
#   CLAIM:  an ltl name from lease.pml, or "-" for no claim (assertions and
#           invalid end states only).
run() {
	local name=$1 expect=$2 claim=$3 defs=$4 cflags=${5:-}
	local t0 out dt verdict errors states depth
	t0=$(now_ms)
	rm -f pan pan.* ./*.trail _spin_nvr.tmp
	# shellcheck disable=SC2086 # defs/cflags are word lists
	spin -a $defs lease.pml >spin.out 2>&1 || { cat spin.out >&2; echo "FAIL $name: spin -a failed" >&2; failures=$((failures + 1)); return; }
	local claimflag=(-N "$claim")
	if [[ "$claim" == - ]]; then
		cflags="$cflags -DNOCLAIM"
		claimflag=()
	fi
	# shellcheck disable=SC2086
	# -O2 for full searches; a naive run stops at its first error after a
	# few hundred states, where compiling pan.c would cost more than searching.
	local opt=-O2
	[[ $expect == fail ]] && opt=-O0
	"$CC" $opt -w -DSAFETY $cflags -o pan pan.c 2>cc.out || { cat cc.out >&2; echo "FAIL $name: cc pan.c failed" >&2; failures=$((failures + 1)); return; }
	./pan -m"$DEPTH" "${claimflag[@]}" >pan.out 2>&1 || true
	dt=$(($(now_ms) - t0))
	out=$(cat pan.out)
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.out | head -n1)
	states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' pan.out | head -n1)
	depth=$(sed -n 's/.*depth reached \([0-9]*\),.*/\1/p' pan.out | head -n1)
	local complete=1
	grep -q 'Full statespace search' pan.out || complete=0
	grep -qiE 'too small|search not completed|max search depth' pan.out && complete=0
	[[ -n "$errors" ]] || { printf '%s\n' "$out" >&2; echo "FAIL $name: could not read pan's result" >&2; failures=$((failures + 1)); return; }

	case $expect in
	hold)
		if [[ "$errors" == 0 && $complete == 1 ]]; then verdict=ok; else verdict=FAIL; fi
		;;
	fail)
		# A violation must be found, and it must be this claim's.
		if [[ "$errors" -ge 1 && -f lease.pml.trail ]] && grep -q "pan: ltl formula $claim" pan.out; then verdict=ok; else verdict=FAIL; fi
		;;
	esac
	printf '%-4s %-36s expect %-4s  errors %-2s states %9s  depth %4s  complete %-3s %6.2fs\n' \
		"$verdict" "$name" "$expect" "$errors" "${states:-?}" "${depth:-?}" \
		"$(if [[ $expect == fail ]]; then echo -; elif [[ $complete == 1 ]]; then echo yes; else echo no; fi)" "$(awk "BEGIN{print $dt/1000}")"
	if [[ -f lease.pml.trail ]]; then
		# The counterexample: the model's own MSC: lines, in order.
		# shellcheck disable=SC2086
		spin -t $defs lease.pml 2>&1 | sed -n 's/^ *MSC: /       | /p'
	fi
	if [[ $verdict != ok ]]; then
		printf '%s\n' "$out" | grep -iE 'ltl formula|violated|invalid end|too small|not completed|error' |
			cut -c1-200 | sed 's/^/       > /' >&2
		failures=$((failures + 1))
	fi
}

echo "spin model check of proof/lease.pml ($(spin -V | head -n1))"

# The design: all properties at once, with revoke, pauses, expiry, retried
# releases; two workers of one instance, then three workers of two instances.
run "fenced NW=2 GMAX=5"               hold safety "-DNW=2 -DGMAX=5 -DTTL=2"
run "fenced NW=3 GMAX=4"               hold safety "-DNW=3 -DGMAX=4 -DTTL=2"
run "fenced NW=3 GMAX=5"               hold safety "-DNW=3 -DGMAX=5 -DTTL=2"
run "fenced NW=2 GMAX=5 (no deadlock)" hold -      "-DNW=2 -DGMAX=5 -DTTL=2"
# The naive designs, breadth-first so the counterexample is a shortest one,
# without the operator so that it is the article's pause/expiry scenario.
run "naive check-then-act"             fail no_stale_commit "-DNAIVE_CTA -DNO_REVOKE -DNW=2 -DGMAX=4" -DBFS
run "naive owner-only write"           fail no_stale_commit "-DNAIVE_OWNER -DNO_REVOKE -DNW=2 -DGMAX=4" -DBFS
run "naive owner-only release"         fail old_token_inert "-DNAIVE_RELEASE -DNO_REVOKE -DNW=2 -DGMAX=4" -DBFS
run "naive owner-only release, write"  hold no_stale_commit "-DNAIVE_RELEASE -DNW=2 -DGMAX=4"
run "naive release deletes the row"    fail monotonic "-DNAIVE_DELETE -DNO_REVOKE -DNW=2 -DGMAX=4" -DBFS
# The database goes back in time (a restored dump, a promoted asynchronous
# replica) up to twice, while a downstream checker accepts fences. The floor
# rule, fence = max(fence + 1, clock), must keep every property; the old
# fence + 1 rule held without rollback and must fail with it; and the floor
# rule must fail too when either clock assumption of ADR 0004 is dropped:
# the clock goes back with the data, or fences run ahead of a stalled clock.
run "old rule fence+1, no rollback"    hold safety "-DPLUS_ONE -DNW=2 -DGMAX=5 -DTTL=2"
run "floor rule, rollback x2"          hold safety "-DROLLBACK=2 -DNW=2 -DGMAX=3 -DTTL=2"
run "old rule fence+1, rollback"       fail checker_unique "-DPLUS_ONE -DROLLBACK=1 -DNO_REVOKE -DNW=2 -DGMAX=3" -DBFS
run "old rule fence+1, rollback (ids)" fail fence_unique "-DPLUS_ONE -DROLLBACK=1 -DNO_REVOKE -DNW=2 -DGMAX=3" -DBFS
run "floor rule, clock goes back too"  fail checker_unique "-DCLOCK_BACK -DROLLBACK=1 -DNO_REVOKE -DNW=2 -DGMAX=3" -DBFS
run "floor rule, clock stalls"         fail checker_unique "-DCLOCK_STALL -DROLLBACK=1 -DNO_REVOKE -DNW=2 -DGMAX=3" -DBFS

total=$(($(now_ms) - total_start))
# CPU time of everything this script ran (spin, cc, pan): the load-independent cost.
times >times.out # in this shell: $(times) would report a subshell's children
cpu=$(tail -n1 times.out | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.1f", u[1]*60 + u[2] + s[1]*60 + s[2] }')
if [[ $failures -ne 0 ]]; then
	printf 'spin: %d run(s) did not turn out as expected (%.1fs, %ss CPU)\n' "$failures" "$(awk "BEGIN{print $total/1000}")" "$cpu" >&2
	exit 1
fi
printf 'spin: all runs as expected: fenced design safe in the bounded model (rollbacks included), naive designs and the old fence rule refuted (%.1fs, %ss CPU)\n' "$(awk "BEGIN{print $total/1000}")" "$cpu"
