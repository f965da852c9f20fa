#!/usr/bin/env bash
# rsyncbench.sh: `rsync -a` over a loopback rsync daemon, the yardstick for our pull (SPEC section 7, issues 3 and 5).
#
# Trees (deterministic, written by tests/bench/gentree on a fresh tmpfs):
#   small  10,000 files of varied sizes (64 B .. 64 KiB, median ~2 KiB), exactly 100,000,000 bytes, in 100
#          package-like directories
#   big    16 files of 64 MiB (1 GiB)
# For each tree and repetition (WSYNC_BENCH_REPS, default 3; medians reported):
#   initial  `rsync -a rsync://127.0.0.1:PORT/TREE/ DST/` into an empty directory on the same tmpfs
#   second   one file of the source changes (16 bytes overwritten in place, new mtime), then the same rsync again
# rsync runs as a daemon on 127.0.0.1 (a temporary rsyncd.conf, a free port, read-only modules, no chroot).
#
# Our pull beside it (optional), run in the same repetition right after rsync on the same tree:
#   WSYNC_PULL_CMD        timed command template. Placeholders: {tree} small|big, {src} the tree's directory,
#                         {dst} an empty directory for this repetition (on the same tmpfs), {phase} initial|second,
#                         {changed} the changed file's path relative to {src} (empty for initial), {rep} 1..N.
#                         Timed by wall clock, unless it prints a line "wsync-seconds: S" on stdout: then S is
#                         used (for a command that must do untimed work first, e.g. import the change into a
#                         container store, and times only the pull itself).
#   WSYNC_PULL_SETUP_CMD  optional, untimed, run once per tree and repetition before the initial phase (same
#                         placeholders, {phase}=setup), e.g. start a computerd and a workspace-server.
#   WSYNC_PULL_TEARDOWN_CMD optional, untimed, run after the second phase ({phase}=teardown).
# The report prints ours/rsync for both phases.
#
# WSYNC_BENCH_WAIT_QUIET=SECONDS waits (up to SECONDS, before each repetition) for other jobs to leave the CPUs idle.
# Other knobs: WSYNC_BENCH_TREES (default "small big"), WSYNC_RSYNC_DISK_DIR=DIR also times the small tree's
# initial rsync onto DIR (a disk; plain and with --fsync), WSYNC_BENCH_TMPFS_SIZE (default 4g), WSYNC_BENCH_KIND=random|text (tree contents).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/bench/lib.sh
source "$HERE/lib.sh"

REPS=${WSYNC_BENCH_REPS:-3}
read -r -a TREES <<<"${WSYNC_BENCH_TREES:-small big}"
KIND=${WSYNC_BENCH_KIND:-random}
command -v rsync >/dev/null || { bench_log "rsync is not installed (apt-get install rsync)"; exit 2; }

BASE= BASE_IS_MOUNT= # bench_tmpfs
RSYNC_PID= # bench_rsync_daemon
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	cd /
	bench_stop_rsync_daemon
	bench_release_base
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bench_tmpfs wsync-rsyncbench
mkdir -p "$BASE/src" "$BASE/dst" "$BASE/bin"

bench_log "building tests/bench/gentree"
(cd "$REPO" && go build -o "$BASE/bin/gentree" ./tests/bench/gentree)
declare -A DESC=()
for tree in "${TREES[@]}"; do
	case $tree in
	small) args=(-n 10000 -total 100000000) ;;
	big) args=(-n 16 -size $((64 << 20))) ;;
	*) bench_log "unknown tree $tree (small, big)"; exit 2 ;;
	esac
	bench_log "generating the $tree tree"
	DESC[$tree]=$("$BASE/bin/gentree" "${args[@]}" -kind "$KIND" "$BASE/src/$tree")
done

# --- rsync daemon on loopback ---------------------------------------------------------------------------------------
modules=()
for tree in "${TREES[@]}"; do modules+=("$tree=$BASE/src/$tree"); done
bench_rsync_daemon "$BASE" "${modules[@]}"

# --- helpers --------------------------------------------------------------------------------------------------------
RESULTS=$BASE/results.txt
: >"$RESULTS"
record() { echo "$1 $2 $3 $4" >>"$RESULTS"; } # record TREE WHAT REP SECONDS

fill() { # fill TEMPLATE TREE DST PHASE CHANGED REP
	local c=$1
	c=${c//\{tree\}/$2}
	c=${c//\{src\}/$BASE/src/$2}
	c=${c//\{dst\}/$3}
	c=${c//\{phase\}/$4}
	c=${c//\{changed\}/$5}
	c=${c//\{rep\}/$6}
	printf '%s' "$c"
}

time_ours() { # time_ours TREE DST PHASE CHANGED REP: prints seconds (wall clock, or the command's wsync-seconds)
	local cmd t0 t1 out self
	cmd=$(fill "$WSYNC_PULL_CMD" "$@")
	bench_now t0
	out=$(bash -c "$cmd" </dev/null) || { bench_log "WSYNC_PULL_CMD failed ($3, rep $5): $cmd"; return 1; }
	bench_now t1
	self=$(printf '%s\n' "$out" | awk '$1 == "wsync-seconds:" { v = $2 } END { if (v != "") print v }')
	if [[ -n $self ]]; then echo "$self"; else bench_fmt_us $((t1 - t0)); fi
}

# --- runs -----------------------------------------------------------------------------------------------------------
bench_log "trees: ${TREES[*]}; $REPS repetitions; machine: $(bench_machine)"
for ((rep = 1; rep <= REPS; rep++)); do
	for tree in "${TREES[@]}"; do
		bench_wait_quiet "${WSYNC_BENCH_WAIT_QUIET:-0}"
		bench_log "rep $rep/$REPS: $tree (machine $(bench_busy_pct)% busy before)"
		dst=$BASE/dst/$tree-rsync-$rep
		mkdir "$dst"
		sync
		record "$tree" rsync_initial "$rep" "$(bench_time_rsync "$tree" "$dst")"
		if [[ -n ${WSYNC_PULL_CMD:-} ]]; then
			odst=$BASE/dst/$tree-ours-$rep
			mkdir "$odst"
			if [[ -n ${WSYNC_PULL_SETUP_CMD:-} ]]; then bash -c "$(fill "$WSYNC_PULL_SETUP_CMD" "$tree" "$odst" setup "" "$rep")" </dev/null; fi
			record "$tree" ours_initial "$rep" "$(time_ours "$tree" "$odst" initial "" "$rep")"
		fi
		changed=$(bench_change_one "$BASE/src/$tree" "$rep")
		record "$tree" rsync_second "$rep" "$(bench_time_rsync "$tree" "$dst")"
		cmp -s "$BASE/src/$tree/$changed" "$dst/$changed" || { bench_log "rsync did not carry $changed"; exit 1; }
		if [[ -n ${WSYNC_PULL_CMD:-} ]]; then
			record "$tree" ours_second "$rep" "$(time_ours "$tree" "$odst" second "$changed" "$rep")"
			if [[ -n ${WSYNC_PULL_TEARDOWN_CMD:-} ]]; then bash -c "$(fill "$WSYNC_PULL_TEARDOWN_CMD" "$tree" "$odst" teardown "$changed" "$rep")" </dev/null; fi
			rm -rf -- "$odst"
		fi
		if [[ $rep -eq 1 ]]; then
			diff -r -q "$BASE/src/$tree" "$dst" >/dev/null || { bench_log "rsync copy of $tree differs from the source"; exit 1; }
		fi
		rm -rf -- "$dst"
	done
done

med() { awk -v t="$1" -v w="$2" '$1 == t && $2 == w { print $4 }' "$RESULTS" | bench_median; }
DISK_LINE=
if [[ -n ${WSYNC_RSYNC_DISK_DIR:-} && " ${TREES[*]} " == *" small "* ]]; then
	ddst=$(mktemp -d "$WSYNC_RSYNC_DISK_DIR/wsync-rsyncbench-disk.XXXXXX")
	for ((rep = 1; rep <= REPS; rep++)); do
		mkdir "$ddst/$rep"
		sync
		record small rsync_disk "$rep" "$(bench_time_rsync small "$ddst/$rep")"
		rm -rf -- "${ddst:?}/$rep"
		mkdir "$ddst/$rep"
		sync
		record small rsync_disk_fsync "$rep" "$(bench_time_rsync small "$ddst/$rep" --fsync)"
		rm -rf -- "${ddst:?}/$rep"
	done
	rmdir "$ddst"
	DISK_LINE="small tree onto disk ($WSYNC_RSYNC_DISK_DIR), initial rsync -a: $(med small rsync_disk) s (into the page cache), with --fsync: $(med small rsync_disk_fsync) s"
fi

# --- report ---------------------------------------------------------------------------------------------------------
rng() { awk -v t="$1" -v w="$2" '$1 == t && $2 == w { print $4 }' "$RESULTS" | sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%.3f-%.3f", v[1], v[NR]; else print "-" }'; }
echo
echo "rsyncbench $(date -u +%Y-%m-%dT%H:%M:%SZ); $(bench_machine); $(rsync --version | head -n 1)"
echo "rsync -a from a daemon on 127.0.0.1 into an empty dir, tmpfs to tmpfs; ${WSYNC_BENCH_STAT:-median} of $REPS (seconds; range in brackets); contents: $KIND"
printf '\n%-6s %6s %10s | %9s %-15s %5s %7s | %9s %-15s | %9s %9s | %6s %6s\n' tree files bytes \
	init "(range)" MB/s files/s second "(range)" ours_init ours_2nd init_x 2nd_x
for tree in "${TREES[@]}"; do
	ri=$(med "$tree" rsync_initial) r2=$(med "$tree" rsync_second) oi=$(med "$tree" ours_initial) o2=$(med "$tree" ours_second)
	read -r _ nfiles _ nbytes <<<"${DESC[$tree]}"
	mbs=$(awk -v b="$nbytes" -v s="$ri" 'BEGIN { printf "%.0f", b / 1e6 / s }')
	fps=$(awk -v n="$nfiles" -v s="$ri" 'BEGIN { printf "%.0f", n / s }')
	printf '%-6s %6s %10s | %9.3f %-15s %5s %7s | %9.3f %-15s | %9s %9s | %6s %6s\n' "$tree" "$nfiles" "$nbytes" \
		"$ri" "($(rng "$tree" rsync_initial))" "$mbs" "$fps" "$r2" "($(rng "$tree" rsync_second))" "$oi" "$o2" \
		"$(bench_ratio "$oi" "$ri")" "$(bench_ratio "$o2" "$r2")"
done
echo "(init_x, 2nd_x: ours/rsync; SPEC bar for the small tree: init_x <= 0.5, ours_2nd < 0.010 s)"
[[ -z $DISK_LINE ]] || echo "$DISK_LINE"
if [[ -z ${WSYNC_PULL_CMD:-} ]]; then echo "(no WSYNC_PULL_CMD: our pull not measured)"; fi
if [[ -n ${WSYNC_BENCH_RESULTS:-} ]]; then cp "$RESULTS" "$WSYNC_BENCH_RESULTS"; fi
