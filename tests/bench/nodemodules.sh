#!/usr/bin/env bash
# nodemodules.sh: is node_modules worth syncing? (issue 14)
#
# Runs a real pair (computerd with :memory: state, workspace-server with its data on tmpfs) over the npm project of
# tests/bench/npm (496 packages, 11,602 files) and times, through the CLI:
#   ci_ignored   exec npm ci --offline (warm cache) with node_modules ignored: the command and its pull
#   pull_nm      the pull of the fresh node_modules when it is not ignored (exec --sync defer, then pull)
#   boot_nm      a replaced container bootstrapped with node_modules in the server's tree (push after a restart)
#   boot_bare    the same without node_modules (a workspace that ignored it)
#   ci_cold      npm ci with an empty cache (what a replaced container without a cache volume pays; needs the registry)
# and prints `name seconds` lines. Usage: sudo tests/bench/nodemodules.sh  (root: FUSE, tmpfs)
# Knobs: WSYNC_BENCH_NPM_CACHE (persistent warm cache, default /var/tmp/wsync-npm-cache), WSYNC_BENCH_REPS (3),
# WSYNC_BENCH_COLD=0 to skip ci_cold.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
REPS=${WSYNC_BENCH_REPS:-3}
CACHE=${WSYNC_BENCH_NPM_CACHE:-/var/tmp/wsync-npm-cache}
T=$(mktemp -d /tmp/wsync-nm.XXXXXX)
CD_PID="" SRV_PID=""
cleanup() {
	[[ -n $SRV_PID ]] && kill "$SRV_PID" 2>/dev/null && wait "$SRV_PID" 2>/dev/null
	[[ -n $CD_PID ]] && kill "$CD_PID" 2>/dev/null && wait "$CD_PID" 2>/dev/null
	bench_unmount "$T/ws" 2>/dev/null || true
	umount "$T" 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT
mount -t tmpfs -o size=4g tmpfs "$T"
mkdir -p "$T/bin" "$T/ws" "$T/data"
(cd "$REPO" && go build -o "$T/bin/" ./cmd/computerd ./cmd/workspace-server)
echo nm-bench-token >"$T/token"
npm_env() { env npm_config_userconfig=/dev/null npm_config_update_notifier=false npm_config_loglevel=error "$@"; }
if [[ ! -f $CACHE/.wsync-warm ]]; then
	bench_log "warming the npm cache $CACHE from the registry (once)"
	mkdir -p "$CACHE" "$T/warm" && cp "$HERE/npm/package.json" "$HERE/npm/package-lock.json" "$T/warm/"
	(cd "$T/warm" && npm_env npm ci --no-audit --no-fund --cache "$CACHE" >/dev/null) && touch "$CACHE/.wsync-warm"
	rm -rf "$T/warm"
fi
CD_ADDR=127.0.0.1:$(bench_free_port)
SRV_ADDR=127.0.0.1:$(bench_free_port)
export WSYNC_SERVER=http://$SRV_ADDR WSYNC_TOKEN_FILE=$T/token
W="$T/bin/workspace-server"
start_cd() {
	"$T/bin/computerd" --listen "$CD_ADDR" --mount "$T/ws" --state :memory: --token-file "$T/token" >>"$T/cd.log" 2>&1 &
	CD_PID=$!
	for _ in $(seq 100); do curl -fs "http://$CD_ADDR/health" >/dev/null && return; sleep 0.1; done
	bench_log "computerd did not come up"; cat "$T/cd.log"; exit 1
}
replace_cd() { kill "$CD_PID"; wait "$CD_PID" || true; CD_PID=""; start_cd; }
start_cd
"$W" serve --listen "$SRV_ADDR" --data "$T/data" --token-file "$T/token" --computerd "ws://$CD_ADDR/sync" \
	--computerd-token-file "$T/token" >>"$T/srv.log" 2>&1 &
SRV_PID=$!
for _ in $(seq 100); do curl -fs "http://$SRV_ADDR/health" >/dev/null && break; sleep 0.1; done
timed() { # name cmd...: append "name seconds"
	local name=$1 a b; shift
	bench_now a; "$@" >/dev/null; bench_now b
	echo "$name $(bench_fmt_us $((b - a)))" | tee -a "$T/results"
}
"$W" write /package.json "$HERE/npm/package.json" >/dev/null
"$W" write /package-lock.json "$HERE/npm/package-lock.json" >/dev/null
ci=(exec --timeout 10m -- env npm_config_update_notifier=false npm ci --offline --no-audit --no-fund --cache "$CACHE")
for _ in $(seq "$REPS"); do
	"$W" ignore --default >/dev/null
	"$W" exec -- rm -rf node_modules >/dev/null
	timed ci_ignored "$W" "${ci[@]}"
	replace_cd
	timed boot_bare "$W" push
	"$W" ignore --none >/dev/null
	"$W" exec -- rm -rf node_modules >/dev/null
	"$W" exec --sync defer -- env npm_config_update_notifier=false npm ci --offline --no-audit --no-fund --cache "$CACHE" >/dev/null
	timed pull_nm "$W" pull
	replace_cd
	timed boot_nm "$W" push
	n=$("$W" exec -- sh -c 'find node_modules -type f | wc -l')
	bench_log "node_modules in the replaced container: $n files"
	"$W" exec -- rm -rf node_modules >/dev/null
	"$W" pull >/dev/null
done
if [[ ${WSYNC_BENCH_COLD:-1} != 0 ]]; then
	"$W" ignore --default >/dev/null
	timed ci_cold "$W" exec --timeout 10m -- sh -c "rm -rf node_modules && env npm_config_update_notifier=false npm ci --no-audit --no-fund --cache $T/coldcache && rm -rf $T/coldcache"
fi
bench_log "medians of $REPS (load $(cut -d' ' -f1-3 /proc/loadavg)):"
for name in ci_ignored pull_nm boot_bare boot_nm ci_cold; do
	vals=$(awk -v n="$name" '$1 == n { print $2 }' "$T/results")
	[[ -n $vals ]] && echo "$name $(echo "$vals" | bench_median)"
done
