#!/usr/bin/env bash
# devworkload.sh DIR: run the dev-workload scenarios inside DIR and print one line per scenario, "name seconds".
#
# Every scenario runs in a fresh work directory under DIR (removed afterwards, untimed). Inputs that must not live in
# the filesystem under test (random 64 MiB sources, the source tarball, the hello module and its warm Go build cache)
# are prepared outside DIR, in $WSYNC_BENCH_DATA (default: a temporary directory in /dev/shm, removed on exit).
# mountbench.sh prepares the data once and passes it to every run so all targets get identical inputs.
#
# Fairness rules (the same for every target; see tests/bench/README.md):
#   - Timing is wall clock from bash's $EPOCHREALTIME (microseconds, no fork), around the scenario's commands only.
#   - "cold" scenarios (stat_1000, find_tree, read_64M, copy_64M) start after `sync; echo 3 >
#     /proc/sys/vm/drop_caches`, so a FUSE target has no cached dentries, attributes or pages and every operation
#     reaches the daemon. tmpfs cannot drop its own pages (they are the storage), so tmpfs stays the in-memory floor.
#     Without root (drop_caches not writable) the script sleeps past the 1 s entry/attr timeouts instead.
#   - 64 MiB writes (write, copy, overwrite) end with an fsync of the written file (dd conv=fsync; cp then
#     `sync FILE`), so a filesystem that defers work to RELEASE or writeback cannot hide it from the timer.
#   - Sources for the 64 MiB writes are random bytes (incompressible, never the same chunk twice), fresh per run.
#   - go_build: GOCACHE lives inside DIR, seeded (untimed) with a warm cache of the hello module's dependencies;
#     main.go changes every run, so the timed `go build` compiles main, reads the cached std archives through the
#     filesystem under test (the linker mmaps them), writes cache entries and links a ~2.4 MB binary into DIR.
#   - npm_ci: `npm ci --offline` of tests/bench/npm (496 packages, 11,602 files, 124 MB) from an npm cache outside
#     DIR, warmed once from the registry (the only network use; never timed). read_node_modules (cold) and
#     rm_node_modules work on that tree.
#   - git_clone: `git clone --no-hardlinks` of a local 800-commit repository built once outside DIR (gentree
#     -git-commits: deterministic, so every target clones the same objects); --no-hardlinks because on a tmpfs target
#     the clone could otherwise hardlink the objects from the source on the same tmpfs, which no FUSE target can.
#     git_checkout checks out 400 commits back (1,556 files differ) and forth in that clone.
#
# Environment:
#   WSYNC_BENCH_DATA       input directory (created and filled if missing pieces)
#   WSYNC_BENCH_SCENARIOS  space-separated subset of scenarios to run (default: all, in the order below)
#   WSYNC_BENCH_NODROP=1   never drop caches (sleep past the kernel cache timeouts instead)
#   WSYNC_BENCH_NPM_CACHE  npm cache directory (default $WSYNC_BENCH_DATA/npm-cache); warmed from the registry when it
#                          lacks the project's packages, so a persistent one spares the download on later runs
set -euo pipefail
export LC_ALL=C

ALL_SCENARIOS="create_1000 stat_1000 rm_1000 mkdir_tree find_tree write_64M read_64M copy_64M overwrite_64M git_commit_100 untar_src go_build npm_ci read_node_modules rm_node_modules git_clone git_checkout"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

usage() { echo "usage: $0 DIR" >&2; exit 2; }
[[ $# -eq 1 ]] || usage
DIR=$1
[[ -d $DIR ]] || { echo "devworkload: $DIR is not a directory" >&2; exit 2; }
DIR=$(cd "$DIR" && pwd)

SCENARIOS=${WSYNC_BENCH_SCENARIOS:-$ALL_SCENARIOS}
for s in $SCENARIOS; do
	[[ " $ALL_SCENARIOS " == *" $s "* ]] || { echo "devworkload: unknown scenario $s (have: $ALL_SCENARIOS)" >&2; exit 2; }
done

OWN_DATA=
DATA=${WSYNC_BENCH_DATA:-}
if [[ -z $DATA ]]; then
	DATA=$(mktemp -d /dev/shm/wsync-bench-data.XXXXXX)
	OWN_DATA=1
fi
mkdir -p "$DATA"
NPM_CACHE=${WSYNC_BENCH_NPM_CACHE:-$DATA/npm-cache}
W="$DIR/devworkload.$$.$RANDOM"

cleanup() {
	local rc=$?
	cd /
	if [[ -n $W && -d $W ]]; then rm -rf -- "$W" || true; fi
	if [[ -n $OWN_DATA ]]; then rm -rf -- "$DATA" || true; fi
	exit "$rc"
}
trap cleanup EXIT

log() { echo "devworkload: $*" >&2; }

# --- environment for go and git: isolated from the user's configuration, identical on every target ------------------
go_env() {
	env GOTOOLCHAIN=local GOPROXY=off GOTELEMETRY=off GOFLAGS= GOWORK=off GO111MODULE=on CGO_ENABLED=0 \
		GOENV=off GOMODCACHE="$DATA/gomodcache" "$@"
}
npm_env() { # no user or global npmrc, no update check; the cache is always named on the command line
	env npm_config_userconfig="$DATA/none.npmrc" npm_config_globalconfig="$DATA/none-global.npmrc" npm_config_update_notifier=false \
		npm_config_loglevel=error "$@"
}
git_env() {
	env GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid \
		GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid \
		GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z" "$@"
}

# --- inputs (outside DIR) -------------------------------------------------------------------------------------------
prepare_data() {
	local goroot
	goroot=$(go_env go env GOROOT)
	if [[ ! -f $DATA/src.tar ]]; then
		# ~2,500 files, ~18 MB: a realistic source tree (Go's own cmd/go, net and go/... packages).
		tar -C "$goroot" -cf "$DATA/src.tar.tmp" src/cmd/go src/net src/go
		mv "$DATA/src.tar.tmp" "$DATA/src.tar"
	fi
	if [[ ! -f $DATA/hello/go.mod ]]; then
		mkdir -p "$DATA/hello"
		printf 'module hello\n\ngo 1.26\n' >"$DATA/hello/go.mod"
		printf 'package main\n\nimport "fmt"\n\nconst build = "seed"\n\nfunc main() { fmt.Println("hello", build) }\n' \
			>"$DATA/hello/main.go"
	fi
	if [[ ! -d $DATA/gocache-seed ]]; then
		log "warming a Go build cache for the hello module (once; ~5 s)"
		(cd "$DATA/hello" && go_env GOCACHE="$DATA/gocache-seed.tmp" go build -o /dev/null .)
		mv "$DATA/gocache-seed.tmp" "$DATA/gocache-seed"
	fi
	if [[ " $SCENARIOS " == *" npm_"* || " $SCENARIOS " == *"_node_modules "* ]] && [[ ! -f $NPM_CACHE/.wsync-warm ]]; then
		log "warming the npm cache $NPM_CACHE from the registry (once; ~1 min)"
		rm -rf "$DATA/npm-warm"
		mkdir -p "$DATA/npm-warm" "$NPM_CACHE"
		cp "$HERE/npm/package.json" "$HERE/npm/package-lock.json" "$DATA/npm-warm/"
		(cd "$DATA/npm-warm" && npm_env npm ci --no-audit --no-fund --cache "$NPM_CACHE" >/dev/null)
		rm -rf "$DATA/npm-warm"
		touch "$NPM_CACHE/.wsync-warm"
	fi
	if [[ " $SCENARIOS " == *" git_clone "* || " $SCENARIOS " == *" git_checkout "* ]] && [[ ! -d $DATA/repo.git ]]; then
		log "building the local 800-commit git repository (once; ~20 s)"
		(cd "$REPO" && go build -o "$DATA/gentree" ./tests/bench/gentree)
		git_env git init -q --bare -b main "$DATA/repo.git.tmp"
		"$DATA/gentree" -git-commits 800 | git_env git -C "$DATA/repo.git.tmp" fast-import --quiet
		git_env git -C "$DATA/repo.git.tmp" repack -adq
		mv "$DATA/repo.git.tmp" "$DATA/repo.git"
	fi
	# Fresh random sources on every run, so no content-addressed store can dedup against an earlier run.
	head -c $((64 << 20)) /dev/urandom >"$DATA/rand-a.bin"
	head -c $((64 << 20)) /dev/urandom >"$DATA/rand-b.bin"
}

# --- timing ---------------------------------------------------------------------------------------------------------
T0=0
tstart() { T0=${EPOCHREALTIME/./}; }
tstop() { # tstop NAME: print "NAME seconds"
	local t1=${EPOCHREALTIME/./}
	local us=$((t1 - T0))
	printf '%s %d.%06d\n' "$1" $((us / 1000000)) $((us % 1000000))
}

CAN_DROP=
if [[ -z ${WSYNC_BENCH_NODROP:-} && -w /proc/sys/vm/drop_caches ]]; then CAN_DROP=1; fi
go_cold() {
	sync
	if [[ -n $CAN_DROP ]]; then
		echo 3 >/proc/sys/vm/drop_caches
		# drop_caches also evicts the tools themselves; reload them (outside DIR) so the timer sees the filesystem only
		stat -c %s /dev/null >/dev/null
		find /dev/null >/dev/null
		wc -l </dev/null >/dev/null
		dd if=/dev/null of=/dev/null status=none
		cp "$DATA/hello/go.mod" "$DATA/warm.tmp"
		sync "$DATA/warm.tmp"
		cat /dev/null >/dev/null
		xargs -0 true </dev/null
	else
		sleep 1.1 # past the 1 s entry/attr timeouts: every lookup revalidates with the daemon
	fi
}

FILES=()
for ((i = 0; i < 1000; i++)); do FILES+=("f$i"); done

# --- scenarios ------------------------------------------------------------------------------------------------------
sc_create_1000() {
	mkdir -p "$W/small" # -p: ensure_small may recreate it after rm_1000
	cd "$W/small"
	local i line
	line=$(printf 'small file content line for the create scenario %.0s' {1..4})
	tstart
	for ((i = 0; i < 1000; i++)); do
		printf '%s %d\n' "$line" "$i" >"f$i" # bash builtin: open(O_CREAT|O_TRUNC), write, close; no fork
	done
	tstop create_1000
	cd "$W"
}
ensure_small() { [[ -f $W/small/f999 ]] || sc_create_1000 >/dev/null; }
sc_stat_1000() {
	ensure_small
	cd "$W/small"
	go_cold
	tstart
	stat -c %s -- "${FILES[@]}" >/dev/null
	tstop stat_1000
	cd "$W"
}
sc_rm_1000() {
	ensure_small
	cd "$W/small"
	tstart
	rm -f -- "${FILES[@]}"
	tstop rm_1000
	cd "$W"
}
sc_mkdir_tree() {
	cd "$W"
	tstart
	mkdir -p tree/{0..9}/{0..9}/{0..9}
	tstop mkdir_tree
}
sc_find_tree() {
	[[ -d $W/tree/9/9/9 ]] || sc_mkdir_tree >/dev/null
	cd "$W"
	go_cold
	local n
	tstart
	n=$(find tree | wc -l)
	tstop find_tree
	[[ $n -eq 1111 ]] || { log "find_tree: expected 1111 entries, got $n"; exit 1; }
}
sc_write_64M() {
	cd "$W"
	tstart
	dd if="$DATA/rand-a.bin" of=big bs=1M conv=fsync status=none
	tstop write_64M
}
ensure_big() { [[ -f $W/big ]] || dd if="$DATA/rand-a.bin" of="$W/big" bs=1M conv=fsync status=none; }
sc_read_64M() {
	ensure_big
	cd "$W"
	go_cold
	tstart
	dd if=big of=/dev/null bs=1M status=none
	tstop read_64M
}
sc_copy_64M() {
	ensure_big
	cd "$W"
	go_cold
	tstart
	cp big big.copy
	sync big.copy
	tstop copy_64M
	cmp -s big big.copy || { log "copy_64M: copy differs"; exit 1; }
	rm -f big.copy
}
sc_overwrite_64M() {
	ensure_big
	cd "$W"
	tstart
	dd if="$DATA/rand-b.bin" of=big bs=1M conv=notrunc,fsync status=none
	tstop overwrite_64M
	cmp -s big "$DATA/rand-b.bin" || { log "overwrite_64M: content differs"; exit 1; }
}
sc_git_commit_100() {
	mkdir -p "$W/repo"
	cd "$W/repo"
	local i d
	for ((i = 0; i < 100; i++)); do # untimed setup: 100 source-like files in 10 directories
		d="pkg$((i % 10))"
		mkdir -p "$d"
		{
			printf 'package %s\n\n' "$d"
			for ((j = 0; j < 40 + i; j++)); do printf 'func F%d_%d() int { return %d * %d }\n' "$i" "$j" "$i" "$j"; done
		} >"$d/file$i.go"
	done
	tstart
	git_env git init -q -b main .
	git_env git add -A
	git_env git commit -q -m "bench: 100 files"
	tstop git_commit_100
	[[ $(git_env git ls-files | wc -l) -eq 100 ]] || { log "git_commit_100: expected 100 tracked files"; exit 1; }
	cd "$W"
}
sc_untar_src() {
	mkdir "$W/untar"
	cd "$W/untar"
	tstart
	tar -xf "$DATA/src.tar"
	tstop untar_src
	cd "$W"
}
sc_go_build() {
	cp -a "$DATA/gocache-seed" "$W/gocache" # untimed: warm cache inside the filesystem under test
	cp -a "$DATA/hello" "$W/hello"
	sed -i "s/^const build = .*/const build = \"run-$$-$RANDOM\"/" "$W/hello/main.go"
	# untimed warm-up with the seed cache outside DIR: GOROOT sources and the go tools in the page cache
	(cd "$DATA/hello" && go_env GOCACHE="$DATA/gocache-seed" go build -o /dev/null .)
	cd "$W/hello"
	tstart
	go_env GOCACHE="$W/gocache" go build -o hello .
	tstop go_build
	./hello >/dev/null
	cd "$W"
}

sc_npm_ci() {
	mkdir "$W/app"
	cp "$HERE/npm/package.json" "$HERE/npm/package-lock.json" "$W/app/"
	cd "$W/app"
	tstart
	npm_env npm ci --offline --no-audit --no-fund --cache "$NPM_CACHE" >/dev/null
	tstop npm_ci
	[[ -f node_modules/typescript/package.json ]] || { log "npm_ci: no node_modules/typescript"; exit 1; }
	cd "$W"
}
ensure_node_modules() { [[ -d $W/app/node_modules ]] || sc_npm_ci >/dev/null; }
sc_read_node_modules() {
	ensure_node_modules
	cd "$W/app"
	go_cold
	local n
	tstart
	n=$(find node_modules -type f -print0 | xargs -0 cat | wc -c)
	tstop read_node_modules
	[[ $n -gt 80000000 ]] || { log "read_node_modules: read only $n bytes (the tree holds 84,060,690)"; exit 1; }
	cd "$W"
}
sc_rm_node_modules() {
	ensure_node_modules
	cd "$W/app"
	tstart
	rm -rf node_modules
	tstop rm_node_modules
	cd "$W"
}
sc_git_clone() {
	cd "$W"
	tstart
	git_env git clone -q --no-hardlinks "$DATA/repo.git" clone
	tstop git_clone
	[[ $(git_env git -C clone rev-list --count HEAD) -eq 800 ]] || { log "git_clone: expected 800 commits"; exit 1; }
}
sc_git_checkout() {
	[[ -d $W/clone/.git ]] || sc_git_clone >/dev/null
	cd "$W/clone"
	tstart
	git_env git checkout -q HEAD~400
	git_env git checkout -q main
	tstop git_checkout
	[[ -z $(git_env git status --porcelain) ]] || { log "git_checkout: the work tree is not clean"; exit 1; }
	cd "$W"
}

# --- main -----------------------------------------------------------------------------------------------------------
prepare_data
mkdir "$W"
for s in $SCENARIOS; do
	cd "$W"
	"sc_$s"
done
