#!/usr/bin/env bash
# run-all.sh: the benchmarks of issue 12 in one go (as root), then one table of ratios:
#   mount  mountbench.sh: every devworkload scenario (npm ci, rm -rf and cold read of node_modules, git clone and
#          checkout, untar, create/rm 1000, git commit, 64 MiB data, stat/find/mkdir, go build) on tmpfs, go-fuse's
#          loopback with and without passthrough, and our mount; interleaved, medians
#   sync   syncbench.sh: pull of N new files and bootstrap of an empty container through the CLI, beside rsync -a over
#          a loopback daemon, N = 10,000, 30,000, 100,000
#   rsync  rsyncbench.sh (not in the default set): rsync alone on the small and the 1 GiB tree, with a WSYNC_PULL_CMD
# WSYNC_BENCH_SUITES picks them (default "mount sync"). WSYNC_BENCH_QUICK=1 is the development mode: one repetition,
# sync sizes 10,000 and 30,000 only. Every knob of the scripts passes through (WSYNC_BENCH_REPS, WSYNC_BENCH_SCENARIOS,
# WSYNC_SYNC_SIZES, WSYNC_BENCH_WAIT_QUIET, WSYNC_COMPUTERD, WSYNC_WORKSPACE_SERVER, ...).
# Each script's output and raw figures are kept under WSYNC_BENCH_LOGDIR (default /tmp/wsync-bench-logs);
# `run-all.sh --report MOUNT_RESULTS SYNC_RESULTS` re-prints the summary of saved raw figures ("-" for none).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/bench/lib.sh
source "$HERE/lib.sh"

# summary MOUNT_RESULTS SYNC_RESULTS: one table, a line per workload: ours in seconds and ours over each baseline,
# judged against issue 12's bars.
summary() {
	local mres=$1 sres=$2 s n ours lb nopt tmp rs ratio bar base verdict
	mmed() { awk -v t="$1" -v s="$2" '$1 == t && $3 == s { print $4 }' "$mres" | bench_median; }
	smed() { awk -v n="$1" -v w="$2" '$1 == n && $3 == w { print $4 }' "$sres" | bench_median; }
	judge() { # judge RATIO BAR
		if [[ $1 == - || $2 == - ]]; then echo -; else awk -v r="$1" -v b="$2" 'BEGIN { print (r <= b ? "ok" : "OVER") }'; fi
	}
	echo
	echo "=== wsync bench summary $(date -u +%Y-%m-%dT%H:%M:%SZ); ${WSYNC_BENCH_STAT:-median}s; $(bench_machine)"
	printf '%-17s %10s | %8s %8s %8s %8s | %-17s %s\n' workload ours_s ours/lb ours/nopt ours/tmp ours/rsync bar verdict
	if [[ -f $mres ]]; then
		for s in $(awk '{ if (!seen[$3]++) print $3 }' "$mres"); do
			ours=$(mmed ours "$s") lb=$(mmed loopback "$s") nopt=$(mmed loopback-nopt "$s") tmp=$(mmed tmpfs "$s")
			case $s in
			write_64M | overwrite_64M | copy_64M) bar=1.6 base=tmpfs ratio=$(bench_ratio "$ours" "$tmp") ;;
			read_64M) bar=1.3 base=tmpfs ratio=$(bench_ratio "$ours" "$tmp") ;;
			*) bar=1.3 base=loopback ratio=$(bench_ratio "$ours" "$lb") ;;
			esac
			verdict=$(judge "$ratio" "$bar")
			printf '%-17s %10s | %8s %8s %8s %8s | %-17s %s\n' "$s" "$ours" "$(bench_ratio "$ours" "$lb")" \
				"$(bench_ratio "$ours" "$nopt")" "$(bench_ratio "$ours" "$tmp")" - "<= ${bar}x $base" "$verdict"
		done
	fi
	if [[ -f $sres ]]; then
		for n in $(awk '{ if (!seen[$1]++) print $1 }' "$sres"); do
			rs=$(smed "$n" rsync)
			ours=$(smed "$n" pull) ratio=$(bench_ratio "$ours" "$rs")
			printf '%-17s %10s | %8s %8s %8s %8s | %-17s %s\n' "pull_$n" "$ours" - - - "$ratio" "<= 0.5x rsync" "$(judge "$ratio" 0.5)"
			ours=$(smed "$n" bootstrap) ratio=$(bench_ratio "$ours" "$rs")
			printf '%-17s %10s | %8s %8s %8s %8s | %-17s %s\n' "bootstrap_$n" "$ours" - - - "$ratio" "<= 1.0x rsync" "$(judge "$ratio" 1.0)"
			ours=$(smed "$n" pull_one)
			printf '%-17s %10s | %8s %8s %8s %8s | %-17s %s\n' "pull_one_$n" "$ours" - - - \
				"$(bench_ratio "$ours" "$(smed "$n" rsync_one)")" "< 0.010 s" "$(judge "$ours" 0.010)"
		done
	fi
	echo "(ours_s: our seconds; ours/lb, ours/nopt, ours/tmp: over go-fuse's loopback with and without passthrough and"
	echo " over tmpfs; ours/rsync: over rsync -a from a loopback daemon of the same tree. Details: the tables above.)"
}

if [[ ${1:-} == --report ]]; then
	[[ $# -eq 3 ]] || { bench_log "usage: $0 --report MOUNT_RESULTS|- SYNC_RESULTS|-"; exit 2; }
	summary "$2" "$3"
	exit 0
fi

LOGDIR=${WSYNC_BENCH_LOGDIR:-/tmp/wsync-bench-logs}
mkdir -p "$LOGDIR"
export WSYNC_BENCH_LOGDIR=$LOGDIR
stamp=$(date -u +%Y%m%dT%H%M%SZ)
read -r -a SUITES <<<"${WSYNC_BENCH_SUITES:-mount sync}"
MRES=- SRES=-
rc=0
for suite in "${SUITES[@]}"; do
	case $suite in
	mount) script=mountbench MRES=$LOGDIR/mountbench-$stamp.results ;;
	sync) script=syncbench SRES=$LOGDIR/syncbench-$stamp.results ;;
	rsync) script=rsyncbench ;;
	*) bench_log "unknown suite $suite (mount, sync, rsync)"; exit 2 ;;
	esac
	echo "=== $script ($LOGDIR/$script-$stamp.log)"
	WSYNC_BENCH_RESULTS=$LOGDIR/$script-$stamp.results "$HERE/$script.sh" 2>&1 | tee "$LOGDIR/$script-$stamp.log" || rc=1
done
summary "$MRES" "$SRES" | tee "$LOGDIR/summary-$stamp.txt"
exit "$rc"
