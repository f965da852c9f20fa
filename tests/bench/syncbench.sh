#!/usr/bin/env bash
# syncbench.sh: our sync end to end through the CLI, beside `rsync -a` over a loopback rsync daemon, same trees, same
# run (issue 12). Real binaries built from the tree: a computerd (FUSE mount, state on the bench tmpfs) and a
# `workspace-server serve --computerd ws://...` (data on the same tmpfs); the timed commands are the CLI verbs.
#
# For each tree size N (WSYNC_SYNC_SIZES, default "10000 30000 100000": a curve) gentree writes a tree of N files of
# about 10 KB (64 B to 64 KiB, median ~2 KiB, N x 10,000 bytes of random bytes; the 10,000-file one is rsyncbench's
# small tree). Every repetition (WSYNC_BENCH_REPS, default 3; medians reported) starts a fresh pair and runs, in order:
#   rsync       `rsync -a rsync://127.0.0.1:PORT/tN/ DST/` into an empty directory (the yardstick of both ours)
#   pull        the tree is copied into the container's mount (`cp -a`, untimed: the container writing N new files),
#               then `workspace-server pull` is timed: N new files from the container into the server's empty store
#   pull_one    one file changed in the mount (16 bytes), `workspace-server pull` again; rsync_one: one file changed
#               in the source, the same rsync again (its rescan)
#   bootstrap   computerd is stopped and restarted with empty state (a container replaced by the platform), then
#               `workspace-server push` is timed: the server sends the whole tree as a snapshot (re-baseline); the
#               mount must then hold the N files
# Ratios: pull/rsync (bar 0.5) and bootstrap/rsync (bar 1.0); both should stay linear in N (us per file shown).
# Timing: wall clock of the CLI process (it includes the client's start, ~10-30 ms); the server's own figure
# (SyncReport.duration) is kept in the raw results as pull_srv / bootstrap_srv, and both daemons' CPU time over the
# call (/proc, 10 ms ticks) as pull_cpu / bootstrap_cpu, reported as cpu/f (us of CPU a file).
#
# Knobs: WSYNC_BENCH_QUICK=1 (1 repetition, sizes 10000 30000), WSYNC_SYNC_SIZES, WSYNC_SYNC_REPS (default
# WSYNC_BENCH_REPS: the 100,000-file repetition takes about 10 minutes on 2 busy cores),
# WSYNC_WORKSPACE_SERVER / WSYNC_COMPUTERD (binaries to use instead of building ./cmd/...), WSYNC_BENCH_WAIT_QUIET,
# WSYNC_BENCH_RESULTS=FILE (raw "N rep what value" lines), WSYNC_BENCH_PERF=DIR (a `perf record -a -g` of each timed
# call, DIR/N-REP-SEQ-VERB.data: `perf report -i FILE --no-children --sort comm,dso,sym`; perf's sampling costs the timed
# calls a few percent, so compare the ratios of runs without it), WSYNC_BENCH_LOGDIR (a failed run's daemon logs), WSYNC_BENCH_TMPFS_SIZE (default 8g here: the 100,000-file
# tree is 1 GB and lives in the source, the container and the server at once), WSYNC_BENCH_STAT=min.
# Needs root (mount, /dev/fuse), rsync, curl. Leaves no mounts or processes behind (trap on EXIT, INT, TERM).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/bench/lib.sh
source "$HERE/lib.sh"

if [[ -n ${WSYNC_BENCH_QUICK:-} && ${WSYNC_BENCH_QUICK:-} != 0 ]]; then QUICK=1; else QUICK=; fi
REPS=${WSYNC_SYNC_REPS:-${WSYNC_BENCH_REPS:-${QUICK:+1}}}
REPS=${REPS:-3}
DEFAULT_SIZES="10000 30000 100000"
[[ -z $QUICK ]] || DEFAULT_SIZES="10000 30000"
read -r -a SIZES <<<"${WSYNC_SYNC_SIZES:-$DEFAULT_SIZES}"
export WSYNC_BENCH_TMPFS_SIZE=${WSYNC_BENCH_TMPFS_SIZE:-8g}

# --- report (a function, so --report FILE can re-print a saved run) -----------------------------------------------
med() { awk -v n="$1" -v w="$2" '$1 == n && $3 == w { print $4 }' "$RESULTS" | bench_median; }
per_file_us() { awk -v s="$1" -v n="$2" 'BEGIN { if (s == "-") print "-"; else printf "%.0f", s * 1e6 / n }'; }
report() {
	local n ri p b r1 p1 hs hc hb pc bc
	echo
	if [[ -n ${REPORT_FROM:-} ]]; then
		echo "syncbench report of $REPORT_FROM (raw results of an earlier run)"
	else
		echo "syncbench $(date -u +%Y-%m-%dT%H:%M:%SZ); $(bench_machine); $(rsync --version | head -n 1)"
	fi
	echo "trees of N files of ~10 KB (random bytes); CLI wall clock; ${WSYNC_BENCH_STAT:-median} of $REPS (seconds)"
	printf '\n%7s %11s | %8s | %8s %6s %7s %7s | %9s %6s %7s %7s | %8s %8s | %7s %7s %8s\n' files bytes rsync pull pull/r us/file \
		cpu/f bootstrap boot/r us/file cpu/f rsync_1 pull_1 srv_MiB cd_MiB boot_MiB
	for n in $(awk '{ if (!seen[$1]++) print $1 }' "$RESULTS"); do
		ri=$(med "$n" rsync) p=$(med "$n" pull) b=$(med "$n" bootstrap) r1=$(med "$n" rsync_one) p1=$(med "$n" pull_one)
		pc=$(med "$n" pull_cpu) bc=$(med "$n" bootstrap_cpu)
		hs=$(awk -v n="$n" '$1 == n && $3 == "hwm_server" && $4 > m { m = $4 } END { printf "%d", m / 1024 }' "$RESULTS")
		hc=$(awk -v n="$n" '$1 == n && $3 == "hwm_computerd" && $4 > m { m = $4 } END { printf "%d", m / 1024 }' "$RESULTS")
		hb=$(awk -v n="$n" '$1 == n && $3 == "hwm_bootstrap" && $4 > m { m = $4 } END { if (m) printf "%d", m / 1024; else print "-" }' "$RESULTS")
		printf '%7s %11s | %8s | %8s %6s %7s %7s | %9s %6s %7s %7s | %8s %8s | %7s %7s %8s\n' "$n" "$((n * 10000))" "$ri" \
			"$p" "$(bench_ratio "$p" "$ri")" "$(per_file_us "$p" "$n")" "$(per_file_us "$pc" "$n")" "$b" \
			"$(bench_ratio "$b" "$ri")" "$(per_file_us "$b" "$n")" "$(per_file_us "$bc" "$n")" "$r1" "$p1" "$hs" "$hc" "$hb"
	done
	echo "(pull/r, boot/r: ours/rsync; bars: pull/r <= 0.5, boot/r <= 1.0, both linear in N; pull_1 < 0.010 s."
	echo " cpu/f: microseconds of CPU a file, both daemons together (/proc; steadier than wall time on a busy machine)."
	echo " rsync_1/pull_1: one file changed, then the same rsync / pull again. srv_MiB, cd_MiB, boot_MiB: peak RSS of the"
	echo " server, of the first computerd of a repetition (the tree written through its mount, then pulled) and of the"
	echo " bootstrapped one, largest over the repetitions)"
}

RESULTS=
if [[ ${1:-} == --report ]]; then # syncbench.sh --report FILE: re-print the table of saved raw results
	[[ -f ${2:-} ]] || { bench_log "usage: $0 --report RESULTS_FILE"; exit 2; }
	RESULTS=$2 REPORT_FROM=$2
	REPS=$(awk '$2 > m { m = $2 } END { print m + 0 }' "$RESULTS")
	report
	exit 0
fi

[[ $(id -u) -eq 0 ]] || { bench_log "needs root (mount, /dev/fuse)"; exit 2; }
[[ -c /dev/fuse ]] || { bench_log "no /dev/fuse"; exit 2; }
for tool in rsync curl; do command -v "$tool" >/dev/null || { bench_log "$tool is not installed"; exit 2; }; done

LOGDIR=${WSYNC_BENCH_LOGDIR:-/tmp/wsync-bench-logs}
BASE= BASE_IS_MOUNT= # bench_tmpfs
RSYNC_PID=           # bench_rsync_daemon
CD_PID= SRV_PID=     # the pair of the current repetition (process groups)
P=                   # its directory: state/, mnt/, data/

stop_computerd() {
	[[ -n $CD_PID ]] || return 0
	bench_term_group "$CD_PID" 150
	bench_unmount "$P/mnt" || true
	kill -KILL -- "-$CD_PID" 2>/dev/null || true
	CD_PID=
}
stop_pair() {
	if [[ -n $SRV_PID ]]; then
		bench_term_group "$SRV_PID" 150
		kill -KILL -- "-$SRV_PID" 2>/dev/null || true
		SRV_PID=
	fi
	stop_computerd
}
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	cd /
	[[ -z ${PERF_PID:-} ]] || kill -INT "$PERF_PID" 2>/dev/null || true
	stop_pair
	if [[ -n $P ]]; then
		bench_unmount "$P/mnt" || true
		if [[ $rc -ne 0 && -d $P ]]; then # keep the daemons' logs of a failed run
			mkdir -p "$LOGDIR"
			cat "$P/computerd.log" "$P/workspace-server.log" >"$LOGDIR/syncbench-failed-$$.log" 2>/dev/null || true
			bench_log "daemon logs of the failed repetition: $LOGDIR/syncbench-failed-$$.log"
		fi
	fi
	bench_stop_rsync_daemon
	bench_release_base
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bench_tmpfs wsync-syncbench
mkdir -p "$BASE/bin" "$BASE/src" "$BASE/dst"

SERVER_BIN=${WSYNC_WORKSPACE_SERVER:-$BASE/bin/workspace-server}
CD_BIN=${WSYNC_COMPUTERD:-$BASE/bin/computerd}
pkgs=(./tests/bench/gentree)
[[ -n ${WSYNC_WORKSPACE_SERVER:-} ]] || pkgs+=(./cmd/workspace-server)
[[ -n ${WSYNC_COMPUTERD:-} ]] || pkgs+=(./cmd/computerd)
bench_log "building ${pkgs[*]}"
(cd "$REPO" && go build -o "$BASE/bin/" "${pkgs[@]}")

head -c 24 /dev/urandom | base64 >"$BASE/token"
chmod 600 "$BASE/token"

modules=()
for n in "${SIZES[@]}"; do
	[[ $n =~ ^[0-9]+$ && $n -ge 100 ]] || { bench_log "bad size $n in WSYNC_SYNC_SIZES"; exit 2; }
	bench_log "generating the $n-file tree"
	"$BASE/bin/gentree" -n "$n" -total $((n * 10000)) "$BASE/src/t$n" >/dev/null
	modules+=("t$n=$BASE/src/t$n")
done
bench_rsync_daemon "$BASE" "${modules[@]}"

# wait_up NAME PID URL: wait until URL/health answers, or fail with the daemon's log when it exits or takes 60 s.
wait_up() {
	local i
	for ((i = 0; i < 600; i++)); do
		if curl -fsS -o /dev/null "$3/health" 2>/dev/null; then return 0; fi
		kill -0 "$2" 2>/dev/null || break
		sleep 0.1
	done
	bench_log "$1 did not come up; its log:"
	tail -n 30 "$P/$1.log" >&2 || true
	return 1
}

start_computerd() { # with the state in $P/state (empty on a fresh start), mounted at $P/mnt
	setsid "$CD_BIN" --listen "127.0.0.1:$CD_PORT" --mount "$P/mnt" --state "$P/state/state.db" \
		--token-file "$BASE/token" >>"$P/computerd.log" 2>&1 </dev/null &
	CD_PID=$!
	wait_up computerd "$CD_PID" "http://127.0.0.1:$CD_PORT"
	bench_is_mounted "$P/mnt" || { bench_log "computerd is up but $P/mnt is not mounted"; return 1; }
}

start_pair() {
	P=$BASE/pair
	mkdir -p "$P/state" "$P/mnt" "$P/data"
	CD_PORT=$(bench_free_port)
	start_computerd
	SRV_PORT=$(bench_free_port)
	setsid "$SERVER_BIN" serve --listen "127.0.0.1:$SRV_PORT" --data "$P/data" --token-file "$BASE/token" \
		--computerd "ws://127.0.0.1:$CD_PORT/sync" --computerd-token-file "$BASE/token" \
		>>"$P/workspace-server.log" 2>&1 </dev/null &
	SRV_PID=$!
	wait_up workspace-server "$SRV_PID" "http://127.0.0.1:$SRV_PORT"
}

# ws VERB...: the CLI against this repetition's server.
# Quiet: the timed calls answer plain JSON, as the figures before progress streams did.
ws() { WSYNC_QUIET=1 WSYNC_SERVER="http://127.0.0.1:$SRV_PORT" WSYNC_TOKEN_FILE="$BASE/token" "$SERVER_BIN" "$@"; }

# timed_sync VERB: runs `ws VERB --json` and sets SYNC_S (CLI wall clock), SYNC_SRV (the report's duration), SYNC_N
# (entries applied) and SYNC_JSON.
timed_sync() {
	local t0 t1
	sync
	bench_wait_quiet "${WSYNC_BENCH_WAIT_QUIET:-0}"
	if [[ -n ${WSYNC_BENCH_PERF:-} ]]; then # a system-wide CPU profile of the call (both daemons and the kernel)
		mkdir -p "$WSYNC_BENCH_PERF"
		PERF_SEQ=$((${PERF_SEQ:-0} + 1))
		perf record -q -a -g -o "$WSYNC_BENCH_PERF/$n-$rep-$PERF_SEQ-$1.data" -- sleep 3600 2>/dev/null &
		PERF_PID=$!
		sleep 0.2 # perf has opened its events
	fi
	local c0s c0c
	c0s=$(bench_cpu_ms "$SRV_PID") c0c=$(bench_cpu_ms "$CD_PID")
	bench_now t0
	SYNC_JSON=$(ws "$1" --json) || { bench_log "workspace-server $1 failed; server log:"; tail -n 20 "$P/workspace-server.log" >&2; return 1; }
	bench_now t1
	SYNC_CPU_SRV=$(($(bench_cpu_ms "$SRV_PID") - c0s)) SYNC_CPU_CD=$(($(bench_cpu_ms "$CD_PID") - c0c))
	if [[ -n ${PERF_PID:-} ]]; then
		kill -INT "$PERF_PID" && wait "$PERF_PID" || true
		PERF_PID=
	fi
	SYNC_S=$(bench_fmt_us $((t1 - t0)))
	SYNC_SRV=$(printf '%s' "$SYNC_JSON" | tr -d ' \n' | sed -n 's/.*"duration_ns":\([0-9]*\).*/\1/p' | awk '{ printf "%.6f", $1 / 1e9 }')
	SYNC_N=$(printf '%s' "$SYNC_JSON" | tr -d ' \n' | sed -n 's/.*"entries":\([0-9]*\).*/\1/p')
}

# cpu_s: the last timed call's CPU time, both daemons together (seconds).
cpu_s() { awk -v s="$SYNC_CPU_SRV" -v c="$SYNC_CPU_CD" 'BEGIN { printf "%.3f", (s + c) / 1000 }'; }

RESULTS=$BASE/results.txt
: >"$RESULTS"
record() { echo "$1 $2 $3 $4" >>"$RESULTS"; } # record N REP WHAT VALUE

bench_log "sizes: ${SIZES[*]}; $REPS repetitions; machine: $(bench_machine)"
for ((rep = 1; rep <= REPS; rep++)); do
	for n in "${SIZES[@]}"; do
		src=$BASE/src/t$n dst=$BASE/dst/t$n
		bench_log "rep $rep/$REPS, $n files: rsync (machine $(bench_busy_pct)% busy before)"
		mkdir "$dst"
		sync
		bench_wait_quiet "${WSYNC_BENCH_WAIT_QUIET:-0}"
		record "$n" "$rep" rsync "$(bench_time_rsync "t$n" "$dst")"

		start_pair
		bench_log "rep $rep/$REPS, $n files: writing the tree into the container's mount (untimed)"
		cp -a "$src" "$P/mnt/tree"
		timed_sync pull
		record "$n" "$rep" pull "$SYNC_S"
		record "$n" "$rep" pull_srv "$SYNC_SRV"
		record "$n" "$rep" pull_cpu "$(cpu_s)"
		# N files and the directories above them; fewer means a pull that left work out
		[[ ${SYNC_N:-0} -ge $n ]] || { bench_log "pull applied ${SYNC_N:-?} entries, expected at least $n: $SYNC_JSON"; exit 1; }

		bench_change_one "$P/mnt/tree" "$rep" >/dev/null
		timed_sync pull
		record "$n" "$rep" pull_one "$SYNC_S"
		changed=$(bench_change_one "$src" "$rep")
		record "$n" "$rep" rsync_one "$(bench_time_rsync "t$n" "$dst")"
		cmp -s "$src/$changed" "$dst/$changed" || { bench_log "rsync did not carry $changed"; exit 1; }
		rm -rf -- "$dst"

		record "$n" "$rep" hwm_computerd "$(bench_hwm_kb "$CD_PID")"
		bench_log "rep $rep/$REPS, $n files: bootstrap of an empty container"
		stop_computerd
		rm -rf -- "$P/state"
		mkdir "$P/state"
		start_computerd
		timed_sync push
		record "$n" "$rep" bootstrap "$SYNC_S"
		record "$n" "$rep" bootstrap_srv "$SYNC_SRV"
		record "$n" "$rep" bootstrap_cpu "$(cpu_s)"
		[[ $SYNC_JSON == *'"rebaselined": true'* || $SYNC_JSON == *'"rebaselined":true'* ]] ||
			{ bench_log "the push did not re-baseline the empty container: $SYNC_JSON"; exit 1; }
		got=$(find "$P/mnt/tree" -type f | wc -l)
		[[ $got -eq $n ]] || { bench_log "after the bootstrap the mount holds $got files of $n"; exit 1; }
		record "$n" "$rep" hwm_server "$(bench_hwm_kb "$SRV_PID")"
		record "$n" "$rep" hwm_bootstrap "$(bench_hwm_kb "$CD_PID")"

		stop_pair
		rm -rf -- "$P"
	done
done
if [[ -n ${WSYNC_BENCH_RESULTS:-} ]]; then cp "$RESULTS" "$WSYNC_BENCH_RESULTS"; fi
report
