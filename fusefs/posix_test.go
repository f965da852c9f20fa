package fusefs_test

import (
	"sort"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"

	"github.com/wsync/wsync/fusefs"
	"github.com/wsync/wsync/internal/fusetest"
)

// posixSkips are the go-fuse conformance tests that cannot pass here, and why.
// Two more skip themselves: Tmpfile (O_TMPFILE is EOPNOTSUPP: the store has no
// nameless files) and RenameOpenDir (a directory replaced by a rename is gone
// at once, so fstat of a descriptor still open on it fails; go-fuse issue 55).
var posixSkips = map[string]string{
	// POSIX record locks belong to a process, and the suite takes both
	// locks from the test process, so the second succeeds on a local disk
	// too (checked on tmpfs). Locks stay in the kernel here, as on a local
	// disk; TestLocksBetweenProcesses checks them across two processes.
	"FcntlFlockLocksFile": "same-process POSIX locks do not conflict (tmpfs behaves the same); see TestLocksBetweenProcesses",
}

// TestPosix runs go-fuse's conformance suite against a fresh mount per test,
// with long cache timeouts so the kernel caches aggressively. The suite has
// no case for FIFOs, sockets or device nodes: TestSpecialFilesAsOnNodevTmpfs
// runs a table of those against a nodev tmpfs as the reference.
func TestPosix(t *testing.T) {
	fusetest.RequireFUSE(t)
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if why, ok := posixSkips[name]; ok {
				t.Skip(why)
			}
			m := fusetest.NewMount(t, fusetest.Options{Options: fusefs.Options{
				EntryTimeout: time.Hour,
				AttrTimeout:  time.Hour,
			}})
			posixtest.All[name](t, m.Dir)
		})
	}
}
