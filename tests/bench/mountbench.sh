#!/usr/bin/env bash
# mountbench.sh: the dev-workload bench (devworkload.sh) in one run, interleaved, against
#   tmpfs         a directory on a fresh tmpfs (the in-memory floor)
#   loopback      go-fuse's loopback filesystem (tests/loopbackfs) over a tmpfs dir, go-fuse defaults: FUSE
#                 passthrough on, so file reads and writes are done by the kernel on the backing file
#   loopback-nopt the same loopback with passthrough off: every READ and WRITE goes through the Go daemon, the floor
#                 for a filesystem that serves bytes from user space (as ours must: files are chunk manifests)
#   ours          our mount (computerd), its state on the same tmpfs
# Medians over WSYNC_BENCH_REPS repetitions (default 3, 1 with WSYNC_BENCH_QUICK=1); the target order rotates every
# repetition. Prints a table of per-scenario seconds and the ratios ours/loopback, ours/tmpfs, loopback/tmpfs, and the
# SPEC section 7 bars.
# Needs root (mount(2), /dev/fuse, drop_caches). Leaves no mounts behind (trap on EXIT, INT, TERM).
#
# Our mount, first match wins:
#   WSYNC_MOUNT_CMD   a command template that mounts ours and stays in the foreground until SIGTERM, which must
#                     unmount and exit. Placeholders: {dir} mount point, {state} state database path (on the bench
#                     tmpfs), {statedir} its directory, {port} a free 127.0.0.1 port, {token} a token file.
#                     e.g. WSYNC_MOUNT_CMD='/usr/local/bin/computerd --listen 127.0.0.1:{port} --mount {dir} --state {state}'
#   WSYNC_COMPUTERD   path to a computerd binary, run as
#                     "$WSYNC_COMPUTERD --listen 127.0.0.1:{port} --mount {dir} --state {state} --token-file {token}"
#   otherwise         ./cmd/computerd is built with `go build` when it has a main package; when it does not build,
#                     or does not mount within WSYNC_MOUNT_TIMEOUT seconds (default 30), (a) is skipped with a message.
#   WSYNC_BENCH_OURS=0 skips (a).
# WSYNC_BENCH_WAIT_QUIET=SECONDS waits (up to SECONDS, before each run) for other jobs to leave the CPUs idle.
# Other knobs: WSYNC_BENCH_TARGETS (default "tmpfs loopback loopback-nopt ours"), WSYNC_BENCH_SCENARIOS (passed to
# devworkload.sh), WSYNC_BENCH_RESULTS=FILE (keep the raw "target rep scenario seconds" lines), WSYNC_BENCH_TMPFS_SIZE
# (default 4g).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/bench/lib.sh
source "$HERE/lib.sh"

if [[ -n ${WSYNC_BENCH_QUICK:-} && ${WSYNC_BENCH_QUICK:-} != 0 ]]; then REPS=${WSYNC_BENCH_REPS:-1}; else REPS=${WSYNC_BENCH_REPS:-3}; fi
read -r -a TARGETS <<<"${WSYNC_BENCH_TARGETS:-tmpfs loopback loopback-nopt ours}"
MOUNT_TIMEOUT=${WSYNC_MOUNT_TIMEOUT:-30}

# --- report (a function, so --report FILE can re-print a saved run) -----------------------------------------------
med() { awk -v t="$1" -v s="$2" '$1 == t && $3 == s { print $4 }' "$RESULTS" | bench_median; }
bar_of() { case $1 in write_64M | copy_64M | overwrite_64M) echo 1.6 ;; go_build) echo - ;; *) echo 1.3 ;; esac; }
verdict() { # verdict RATIO BAR
	if [[ $1 == - || $2 == - ]]; then echo -; else awk -v r="$1" -v b="$2" 'BEGIN { print (r <= b ? "ok" : "OVER") }'; fi
}
report() {
	local t s a b bn c r_ob r_on bar
	echo
	if [[ -n ${REPORT_FROM:-} ]]; then
		echo "mountbench report of $REPORT_FROM (raw results of an earlier run)"
	else
		echo "mountbench $(date -u +%Y-%m-%dT%H:%M:%SZ); $(bench_machine)"
	fi
	echo "${WSYNC_BENCH_STAT:-median} of $REPS (seconds); targets measured: ${ACTIVE[*]}"
	for t in "${TARGETS[@]}"; do if [[ -n ${SKIP[$t]:-} ]]; then echo "skipped $t: ${SKIP[$t]}"; fi; done
	printf '\n%-17s %9s %9s %9s %9s | %8s %8s %8s %8s %8s | %4s %5s %5s\n' scenario tmpfs loopback lb-nopt ours \
		lb/tmpfs nopt/tmp ours/lb ours/nopt ours/tmp bar vs-lb vs-nopt
	SCEN=$(awk '{ if (!seen[$3]++) print $3 }' "$RESULTS")
	for s in $SCEN; do
		a=$(med ours "$s") b=$(med loopback "$s") bn=$(med loopback-nopt "$s") c=$(med tmpfs "$s")
		r_ob=$(bench_ratio "$a" "$b") r_on=$(bench_ratio "$a" "$bn") bar=$(bar_of "$s")
		printf '%-17s %9s %9s %9s %9s | %8s %8s %8s %8s %8s | %4s %5s %5s\n' "$s" "$c" "$b" "$bn" "$a" \
			"$(bench_ratio "$b" "$c")" "$(bench_ratio "$bn" "$c")" "$r_ob" "$r_on" "$(bench_ratio "$a" "$c")" \
			"$bar" "$(verdict "$r_ob" "$bar")" "$(verdict "$r_on" "$bar")"
	done
	echo
	for t in "${!HWM[@]}"; do echo "peak RSS (VmHWM) of the $t daemon: $((HWM[$t] / 1024)) MiB"; done
}

RESULTS=
declare -A HWM=() SKIP=()
ACTIVE=()
if [[ ${1:-} == --report ]]; then # mountbench.sh --report FILE: re-print the table of saved raw results
	[[ -f ${2:-} ]] || { bench_log "usage: $0 --report RESULTS_FILE"; exit 2; }
	RESULTS=$2 REPORT_FROM=$2
	read -r -a ACTIVE <<<"$(awk '{ if (!seen[$1]++) printf "%s ", $1 }' "$RESULTS")"
	REPS=$(awk '$2 > m { m = $2 } END { print m + 0 }' "$RESULTS")
	report
	exit 0
fi

[[ $(id -u) -eq 0 ]] || { bench_log "needs root (mounts, /dev/fuse, drop_caches)"; exit 2; }
[[ -c /dev/fuse ]] || { bench_log "no /dev/fuse"; exit 2; }

BASE= BASE_IS_MOUNT= # bench_tmpfs
declare -A PGID=()     # target -> process group of its daemon
declare -A MNT=()      # target -> directory the workload runs in
FAILED=()

stop_daemon() { # stop_daemon TARGET: SIGTERM its process group, wait, then make sure the mount is gone
	local t=$1 pg=${PGID[$1]:-}
	[[ -n $pg ]] || return 0
	bench_term_group "$pg" 150
	if [[ -n ${MNT[$t]:-} ]]; then bench_unmount "${MNT[$t]}" || true; fi
	kill -KILL -- "-$pg" 2>/dev/null || true
	unset "PGID[$t]"
}

cleanup() {
	local rc=$? t
	trap - EXIT INT TERM
	cd /
	for t in "${!PGID[@]}"; do stop_daemon "$t"; done
	for t in "${!MNT[@]}"; do bench_unmount "${MNT[$t]}" || true; done
	bench_release_base
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A fresh tmpfs holds everything: tmpfs target, loopback backing dirs, our state, the workload inputs. Same medium for
# every target (PERF-NOTES: compare like with like).
bench_tmpfs wsync-mountbench
mkdir -p "$BASE/bin" "$BASE/data" "$BASE/logs"
export WSYNC_BENCH_DATA=$BASE/data

# start_daemon TARGET DIR CMD: run CMD in its own session (process group = its pid), wait until DIR is mounted.
start_daemon() {
	local t=$1 dir=$2 cmd=$3 pid i
	mkdir -p "$dir"
	setsid bash -c "$cmd" >"$BASE/logs/$t.log" 2>&1 </dev/null &
	pid=$!
	PGID[$t]=$pid
	MNT[$t]=$dir
	for ((i = 0; i < MOUNT_TIMEOUT * 10; i++)); do
		if bench_is_mounted "$dir"; then
			if echo probe >"$dir/.bench-probe" && [[ $(cat "$dir/.bench-probe") == probe ]] && rm -f "$dir/.bench-probe"; then
				return 0
			fi
			bench_log "$t: mounted at $dir but a write/read probe failed"
			return 1
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			bench_log "$t: exited before mounting; log:"
			tail -n 20 "$BASE/logs/$t.log" >&2 || true
			return 1
		fi
		sleep 0.1
	done
	bench_log "$t: not mounted after ${MOUNT_TIMEOUT}s; log:"
	tail -n 20 "$BASE/logs/$t.log" >&2 || true
	return 1
}

want() { [[ " ${TARGETS[*]} " == *" $1 "* ]]; }

# --- targets --------------------------------------------------------------------------------------------------------
if want loopback || want loopback-nopt; then
	bench_log "building tests/loopbackfs"
	(cd "$REPO" && go build -o "$BASE/bin/loopbackfs" ./tests/loopbackfs)
fi
if want tmpfs; then
	mkdir -p "$BASE/tmpfs"
	MNT[tmpfs]=$BASE/tmpfs
fi
if want loopback; then
	mkdir -p "$BASE/lb-src"
	start_daemon loopback "$BASE/lb-mnt" "exec '$BASE/bin/loopbackfs' '$BASE/lb-src' '$BASE/lb-mnt'"
fi
if want loopback-nopt; then
	mkdir -p "$BASE/lbn-src"
	start_daemon loopback-nopt "$BASE/lbn-mnt" "exec '$BASE/bin/loopbackfs' -passthrough=false '$BASE/lbn-src' '$BASE/lbn-mnt'"
fi
if want ours; then
	ours_cmd=${WSYNC_MOUNT_CMD:-}
	ours_explicit=${ours_cmd:+1}
	if [[ ${WSYNC_BENCH_OURS:-1} == 0 ]]; then
		SKIP[ours]="WSYNC_BENCH_OURS=0"
	elif [[ -z $ours_cmd && -n ${WSYNC_COMPUTERD:-} ]]; then
		ours_cmd="'$WSYNC_COMPUTERD' --listen 127.0.0.1:{port} --mount {dir} --state {state} --token-file {token}"
		ours_explicit=1
	elif [[ -z $ours_cmd ]]; then
		if grep -qs '^package main' "$REPO"/cmd/computerd/*.go; then
			bench_log "building ./cmd/computerd"
			if (cd "$REPO" && go build -o "$BASE/bin/computerd" ./cmd/computerd) >"$BASE/logs/computerd-build.log" 2>&1; then
				ours_cmd="'$BASE/bin/computerd' --listen 127.0.0.1:{port} --mount {dir} --state {state} --token-file {token}"
			else
				SKIP[ours]="./cmd/computerd does not build: $(head -n 3 "$BASE/logs/computerd-build.log" | tr '\n' ' ')"
			fi
		else
			SKIP[ours]="no computerd yet (./cmd/computerd has no main package); set WSYNC_MOUNT_CMD or WSYNC_COMPUTERD"
		fi
	fi
	if [[ -z ${SKIP[ours]:-} ]]; then
		mkdir -p "$BASE/ours-state"
		head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$BASE/ours-token"
		port=$(bench_free_port)
		ours_cmd=${ours_cmd//\{dir\}/$BASE/ours-mnt}
		ours_cmd=${ours_cmd//\{state\}/$BASE/ours-state/state.db}
		ours_cmd=${ours_cmd//\{statedir\}/$BASE/ours-state}
		ours_cmd=${ours_cmd//\{port\}/$port}
		ours_cmd=${ours_cmd//\{token\}/$BASE/ours-token}
		bench_log "ours: $ours_cmd"
		if ! start_daemon ours "$BASE/ours-mnt" "exec $ours_cmd"; then
			if [[ -n $ours_explicit ]]; then
				bench_log "ours: the mount command given did not produce a working mount"
				exit 1
			fi
			stop_daemon ours
			SKIP[ours]="computerd did not mount (log: see above)"
		fi
	fi
	if [[ -n ${SKIP[ours]:-} ]]; then
		bench_log "skipping (a) ours: ${SKIP[ours]}"
		unset "MNT[ours]"
	fi
fi

ACTIVE=()
for t in "${TARGETS[@]}"; do if [[ -n ${MNT[$t]:-} ]]; then ACTIVE+=("$t"); fi; done
[[ ${#ACTIVE[@]} -gt 0 ]] || { bench_log "no target to measure"; exit 1; }

# --- runs, interleaved ----------------------------------------------------------------------------------------------
RESULTS=$BASE/results.txt
: >"$RESULTS"
bench_log "targets: ${ACTIVE[*]}; $REPS repetitions; machine: $(bench_machine)"
for ((rep = 1; rep <= REPS; rep++)); do
	n=${#ACTIVE[@]}
	for ((k = 0; k < n; k++)); do
		t=${ACTIVE[$(((k + rep - 1) % n))]}
		bench_wait_quiet "${WSYNC_BENCH_WAIT_QUIET:-0}"
		bench_log "rep $rep/$REPS: $t (machine $(bench_busy_pct)% busy before)"
		if ! "$HERE/devworkload.sh" "${MNT[$t]}" >"$BASE/out.txt" 2>"$BASE/err.txt"; then
			bench_log "rep $rep: devworkload failed on $t:"
			tail -n 10 "$BASE/err.txt" >&2 || true
			FAILED+=("$t/rep$rep")
		fi
		awk -v t="$t" -v r="$rep" 'NF == 2 { print t, r, $1, $2 }' "$BASE/out.txt" >>"$RESULTS"
	done
done
if [[ -n ${WSYNC_BENCH_RESULTS:-} ]]; then cp "$RESULTS" "$WSYNC_BENCH_RESULTS"; fi

for t in "${!PGID[@]}"; do HWM[$t]=$(bench_hwm_kb "${PGID[$t]}"); done
for t in "${!PGID[@]}"; do stop_daemon "$t"; done

report
if [[ ${#FAILED[@]} -gt 0 ]]; then
	echo "FAILED runs (missing figures): ${FAILED[*]}"
	exit 1
fi
