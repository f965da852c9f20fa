// Package crashpoint lets the crash tests kill a daemon at a named point of
// its work, deterministically, so a failing seed replays the same crash.
//
// A call site is one line, Hit("name"), placed at a durability boundary
// (after a batch commits, before its acknowledgement is sent or recorded).
// With WSYNC_CRASHPOINT unset, Hit is an atomic load and a return. With
// WSYNC_CRASHPOINT=name:n, the process SIGKILLs itself at the nth Hit of
// that name (n defaults to 1), after writing one line naming the point to
// stderr, so the test can tell the crash from any other death.
//
// Production binaries link it: the environment variable is the only way in,
// and a SIGKILL is what a crash, an OOM kill or a lost container does anyway.
package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Env names the crash point: "name" or "name:n".
const Env = "WSYNC_CRASHPOINT"

var (
	armed  atomic.Bool
	target string
	nth    int64
	hits   atomic.Int64
)

func init() {
	v := os.Getenv(Env)
	if v == "" {
		return
	}
	name, count, ok := strings.Cut(v, ":")
	nth = 1
	if ok {
		n, err := strconv.ParseInt(count, 10, 64)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "crashpoint: %s=%q: want name or name:n with n >= 1\n", Env, v)
			return
		}
		nth = n
	}
	target = name
	armed.Store(true)
}

// Hit marks one pass through the named point; see the package comment.
func Hit(name string) {
	if !armed.Load() || name != target {
		return
	}
	if hits.Add(1) != nth {
		return
	}
	fmt.Fprintf(os.Stderr, "crashpoint: %s hit %d: SIGKILL\n", name, nth)
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way; nothing after the point may run
}
