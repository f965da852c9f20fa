# shellcheck shell=bash
# Helpers shared by the benchmark scripts (sourced, not run).

export LC_ALL=C
shopt -s inherit_errexit # a failure inside $(...) fails the script too

bench_log() { echo "$(basename "$0"): $*" >&2; }

# Microsecond wall clock without a fork: sets the variable named by $1.
bench_now() { printf -v "$1" '%s' "${EPOCHREALTIME/./}"; }

# bench_fmt_us US: seconds with 6 decimals.
bench_fmt_us() { printf '%d.%06d' $(($1 / 1000000)) $(($1 % 1000000)); }

# bench_median: median of the numbers on stdin (mean of the middle two for an even count); "-" for none.
# WSYNC_BENCH_STAT=min reports the minimum instead (a better estimator when other jobs share the machine).
bench_median() {
	sort -g | awk -v stat="${WSYNC_BENCH_STAT:-median}" '{ v[NR] = $1 } END {
		if (NR == 0) { print "-"; exit }
		if (stat == "min") printf "%.6f\n", v[1]
		else if (NR % 2) printf "%.6f\n", v[(NR + 1) / 2]; else printf "%.6f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# bench_ratio A B: A/B with 2 decimals, "-" when either is missing or B is zero.
bench_ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f\n", a / b }'
}

# bench_free_port: a TCP port on 127.0.0.1 that nothing listens on (probed with bash's /dev/tcp).
bench_free_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# bench_machine: one line describing the machine, for the record.
bench_machine() {
	local cpu
	cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
	printf '%s; %s cores; %s MiB RAM; kernel %s; %s; load %s\n' "$cpu" "$(nproc)" \
		"$(awk '/^MemTotal/ { printf "%d", $2 / 1024 }' /proc/meminfo)" "$(uname -r)" \
		"$(go version 2>/dev/null || echo 'no go')" "$(cut -d' ' -f1-3 /proc/loadavg)"
}

# bench_hwm_kb PGID: the largest VmHWM (peak RSS, KiB) of the live processes in process group PGID.
# bench_cpu_ms PGID: CPU time (user + system, ms) the processes of a process group have used so far (/proc,
# 10 ms ticks).
bench_cpu_ms() {
	local pgid=$1 sum=0 pid t
	for pid in $(pgrep -g "$pgid" 2>/dev/null); do
		t=$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || true)
		[[ -z $t ]] || sum=$((sum + t))
	done
	echo $((sum * 1000 / $(getconf CLK_TCK)))
}

bench_hwm_kb() {
	local pgid=$1 max=0 pid hwm
	for pid in $(pgrep -g "$pgid" 2>/dev/null); do
		hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
		if [[ -n $hwm && $hwm -gt $max ]]; then max=$hwm; fi
	done
	echo "$max"
}

# bench_is_mounted DIR: true when DIR is a mount point (reads /proc/self/mountinfo; never touches DIR itself, so a
# dead FUSE daemon cannot hang it).
bench_is_mounted() {
	local d
	d=$(readlink -f "$1" 2>/dev/null || echo "$1")
	awk -v d="$d" '$5 == d { found = 1 } END { exit !found }' /proc/self/mountinfo
}

# bench_unmount DIR: unmount DIR if mounted (plain, then lazy), never blocking forever.
bench_unmount() {
	local d=$1
	bench_is_mounted "$d" || return 0
	timeout 10 umount "$d" 2>/dev/null || timeout 10 fusermount3 -u "$d" 2>/dev/null || true
	bench_is_mounted "$d" || return 0
	timeout 10 umount -l "$d" 2>/dev/null || timeout 10 fusermount3 -uz "$d" 2>/dev/null || true
	if bench_is_mounted "$d"; then
		bench_log "could not unmount $d"
		return 1
	fi
}

# bench_busy_pct: percentage of all CPUs busy over the next 0.5 s (from /proc/stat).
bench_busy_pct() {
	local a b
	a=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat)
	sleep 0.5
	b=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat)
	awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); t = y[2] - x[2]; printf "%d\n", (t > 0 ? 100 * (y[1] - x[1]) / t : 0) }'
}

# bench_wait_quiet MAXSEC: on a shared machine, wait (up to MAXSEC seconds) until other jobs leave the CPUs mostly idle
# (under 20% busy over half a second). MAXSEC 0 (the default of WSYNC_BENCH_WAIT_QUIET) does not wait.
bench_wait_quiet() {
	local max=${1:-0} start=$SECONDS busy
	[[ $max -gt 0 ]] || return 0
	while :; do
		busy=$(bench_busy_pct)
		[[ $busy -lt 20 ]] && return 0
		if ((SECONDS - start >= max)); then
			bench_log "machine still ${busy}% busy after ${max}s; measuring anyway"
			return 0
		fi
		sleep 2
	done
}

# bench_tmpfs NAME: a new directory /tmp/NAME.XXXXXX with a fresh tmpfs on it (WSYNC_BENCH_TMPFS_SIZE, default 4g)
# for everything a bench writes, the same medium for every target; when that cannot be mounted (not root), a new
# directory in /dev/shm. Sets BASE, and BASE_IS_MOUNT=1 for the tmpfs; bench_release_base undoes it.
bench_tmpfs() {
	BASE=$(mktemp -d "/tmp/$1.XXXXXX")
	BASE_IS_MOUNT=
	if [[ $(id -u) -eq 0 ]] && mount -t tmpfs -o "size=${WSYNC_BENCH_TMPFS_SIZE:-4g},mode=0755" "$1" "$BASE"; then
		BASE_IS_MOUNT=1
	else
		bench_log "no fresh tmpfs (not root, or the mount failed); using a directory in /dev/shm"
		rmdir "$BASE"
		BASE=$(mktemp -d "/dev/shm/$1.XXXXXX")
	fi
}

# bench_release_base: unmount bench_tmpfs's tmpfs (lazily if need be) and remove BASE; with mounts still on or under
# it, only warn.
bench_release_base() {
	[[ -n ${BASE:-} ]] || return 0
	if [[ -n ${BASE_IS_MOUNT:-} ]]; then
		timeout 20 umount "$BASE" 2>/dev/null || timeout 20 umount -l "$BASE" || true
	fi
	if bench_is_mounted "$BASE" || grep -q " $BASE/" /proc/self/mountinfo; then
		bench_log "WARNING: mounts left under $BASE"
	else
		rm -rf -- "$BASE"
	fi
}

# bench_term_group PGID TENTHS: SIGTERM process group PGID and wait up to TENTHS tenths of a second for its leader to
# exit. The caller sends the SIGKILL, after whatever must come between (an unmount).
bench_term_group() {
	local pg=$1 i
	kill -0 "$pg" 2>/dev/null || return 0
	kill -TERM -- "-$pg" 2>/dev/null || true
	for ((i = 0; i < $2; i++)); do
		kill -0 "$pg" 2>/dev/null || break
		sleep 0.1
	done
}

# bench_rsync_daemon DIR NAME=PATH...: start `rsync --daemon` on 127.0.0.1 (a free port, rsyncd.conf and logs in DIR,
# no chroot, one read-only module per NAME=PATH) in its own process group, and wait until it listens. Sets RSYNC_PORT
# and RSYNC_PID (the group: bench_term_group stops it).
bench_rsync_daemon() {
	local dir=$1 m i
	shift
	RSYNC_PORT=$(bench_free_port)
	{
		echo "port = $RSYNC_PORT"
		echo "address = 127.0.0.1"
		echo "use chroot = no"
		echo "pid file = $dir/rsyncd.pid"
		echo "log file = $dir/rsyncd.log"
		echo "max connections = 8"
		for m in "$@"; do
			printf '[%s]\n\tpath = %s\n\tread only = yes\n\tuid = root\n\tgid = root\n' "${m%%=*}" "${m#*=}"
		done
	} >"$dir/rsyncd.conf"
	setsid rsync --daemon --no-detach --config="$dir/rsyncd.conf" </dev/null >"$dir/rsyncd.out" 2>&1 &
	RSYNC_PID=$!
	for ((i = 0; i < 100; i++)); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$RSYNC_PORT") 2>/dev/null; then
			bench_log "rsync daemon on 127.0.0.1:$RSYNC_PORT (pid $RSYNC_PID); $(rsync --version | head -n 1)"
			return 0
		fi
		kill -0 "$RSYNC_PID" 2>/dev/null || break
		sleep 0.1
	done
	bench_log "rsync daemon did not start:"
	cat "$dir/rsyncd.out" "$dir/rsyncd.log" >&2 || true
	return 1
}

# bench_stop_rsync_daemon: stop bench_rsync_daemon's daemon, if any.
bench_stop_rsync_daemon() {
	[[ -n ${RSYNC_PID:-} ]] || return 0
	bench_term_group "$RSYNC_PID" 50
	kill -KILL -- "-$RSYNC_PID" 2>/dev/null || true
	RSYNC_PID=
}

# bench_time_rsync MODULE DST [RSYNC_OPTION...]: `rsync -a` of bench_rsync_daemon's MODULE into DST; prints seconds.
bench_time_rsync() {
	local t0 t1 module=$1 dst=$2
	shift 2
	bench_now t0
	rsync -a "$@" "rsync://127.0.0.1:$RSYNC_PORT/$module/" "$dst/"
	bench_now t1
	bench_fmt_us $((t1 - t0))
}

# bench_change_one ROOT N: overwrite 16 bytes in the middle of one file of the tree ROOT, in place, with a new mtime;
# N picks the file (a different one for every N). Prints the file's path relative to ROOT.
bench_change_one() {
	local root=$1 rel size files
	mapfile -t files < <(cd "$root" && find . -type f -size +1k | sort)
	rel=${files[$(((37 * $2) % ${#files[@]}))]}
	rel=${rel#./}
	size=$(stat -c %s "$root/$rel")
	printf 'rep%02d-changed!!\n' "$2" | dd of="$root/$rel" bs=1 seek=$((size / 2)) conv=notrunc status=none
	touch -d "@$(($(date +%s) + $2))" "$root/$rel"
	printf '%s' "$rel"
}
