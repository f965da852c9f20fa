#!/usr/bin/env bash
# run-all.sh: every benchmark in one go (as root): the mount bench (tmpfs, go-fuse loopback with and without
# passthrough, and our mount when available), then the rsync/pull bench. Output is also saved under
# WSYNC_BENCH_LOGDIR (default /tmp/wsync-bench-logs), one file per script and run.
# All the knobs of mountbench.sh and rsyncbench.sh (WSYNC_MOUNT_CMD, WSYNC_COMPUTERD, WSYNC_PULL_CMD, ...) pass through.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOGDIR=${WSYNC_BENCH_LOGDIR:-/tmp/wsync-bench-logs}
mkdir -p "$LOGDIR"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
rc=0
for b in mountbench rsyncbench; do
	echo "=== $b ($LOGDIR/$b-$stamp.log)"
	"$HERE/$b.sh" 2>&1 | tee "$LOGDIR/$b-$stamp.log" || rc=1
done
exit "$rc"
