#!/usr/bin/env bash
# Brings up a wsync pair on this machine: workspace-server with an embedded computerd and a real
# FUSE mount, writes a file inside the container's mount with `exec`, and reads it back from the
# server's store. Needs root (mount) and /dev/fuse.
#
#   sudo scripts/demo.sh          # show the round trip, then keep the pair up until Ctrl-C
#   sudo scripts/demo.sh --once   # show the round trip and stop (what CI runs)
set -euo pipefail
cd "$(dirname "$0")/.."

# sudo resets PATH; Go's default install place still works.
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"

once=false
[[ "${1:-}" == "--once" ]] && once=true
port=${WSYNC_DEMO_PORT:-8080}
demo=$(mktemp -d /tmp/wsync-demo.XXXXXX)
mkdir -p "$demo/bin"

echo "== building into $demo/bin"
go build -o "$demo/bin/" ./cmd/workspace-server ./cmd/computerd

head -c 24 /dev/urandom | base64 > "$demo/token"
chmod 600 "$demo/token"
export WSYNC_SERVER="http://127.0.0.1:$port" WSYNC_TOKEN_FILE="$demo/token"
ws="$demo/bin/workspace-server"

echo "== starting: workspace-server serve --mount $demo/workspace (embedded computerd)"
"$ws" serve --listen "127.0.0.1:$port" --data "$demo/data" --mount "$demo/workspace" \
  --token-file "$demo/token" >"$demo/server.log" 2>&1 &
pid=$!
cleanup() {
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  umount -l "$demo/workspace" 2>/dev/null || true
  rm -rf "$demo"
}
trap cleanup EXIT

for _ in $(seq 1 150); do
  if curl -fsS "$WSYNC_SERVER/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then cat "$demo/server.log"; exit 1; fi
  sleep 0.1
done

echo "== in the container: echo 'hello from the container' > hello.txt"
"$ws" exec -- sh -c 'echo "hello from the container" > hello.txt && ls -l hello.txt'
echo "== on the server: workspace-server read /hello.txt"
"$ws" read /hello.txt
"$ws" status

if ! $once; then
  cat <<TXT

The pair is up. In another shell:
  export WSYNC_SERVER=$WSYNC_SERVER WSYNC_TOKEN_FILE=$WSYNC_TOKEN_FILE
  $ws exec -- sh -c 'date > now.txt'; $ws read /now.txt; ls $demo/workspace
Server log: $demo/server.log. Ctrl-C stops it.
TXT
  wait "$pid"
fi
