package testutil

import (
	"syscall"
	"testing"
	"time"
)

// ProcessCPU is the CPU time this process used so far, user and system:
// a benchmark's figure that holds still on a loaded machine where wall
// time does not (every goroutine counts, a store's or a FUSE server's).
func ProcessCPU(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
