package execrun

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// becomeSubreaper makes this process the reaper of orphaned descendants, so
// the children an exec's leader leaves behind are reparented here, where
// clearGroup can reap them, instead of to an init that may never wait.
func becomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// waitExited blocks until the child pid has exited, leaving it a zombie. An
// unreaped leader keeps its pid, and so the group id, from being reused: until
// it is reaped, signalling -pid reaches this exec's group and no other.
func waitExited(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return err
		}
	}
}

// signalGroup signals every process of the group. A group already gone is
// not an error.
func signalGroup(pgid int, sig unix.Signal) error {
	if err := unix.Kill(-pgid, sig); err != nil && err != unix.ESRCH {
		return err
	}
	return nil
}

var errGroupSurvived = errors.New("process group still has members")

// clearGroup waits, up to budget, until no process of the group pgid is left,
// reaping the members that were reparented to us. The group has been sent
// SIGKILL, so this is the time the kernel takes to tear it down; zombies count
// as members until someone reaps them.
func clearGroup(pgid int, budget time.Duration) error {
	deadline := time.Now().Add(budget)
	pause := 50 * time.Microsecond
	for {
		for {
			wpid, err := unix.Wait4(-pgid, nil, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil || wpid <= 0 {
				break
			}
		}
		if err := unix.Kill(-pgid, 0); err == unix.ESRCH {
			return nil
		}
		if time.Now().After(deadline) {
			return errGroupSurvived
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// dirError is enterDir's failure to move: the thread has left the shared
// working directory already.
type dirError struct{ err error }

func (e *dirError) Error() string { return e.err.Error() }
func (e *dirError) Unwrap() error { return e.err }

// enterDir gives the calling thread a working directory of its own and
// moves it into dir. The caller holds the thread locked and never unlocks it
// once this succeeded or failed with a *dirError: the process's other
// threads keep theirs.
func enterDir(dir string) error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare CLONE_FS: %w", err)
	}
	if err := unix.Chdir(dir); err != nil {
		return &dirError{fmt.Errorf("chdir %s: %w", dir, err)}
	}
	return nil
}

// mountDevice is the device of the file system mounted at root, and false
// when root is no mount point (its parent has the same device): a plain
// directory, which no FUSE server in this process serves.
func mountDevice(root string) (uint64, bool) {
	var st, parent unix.Stat_t
	if unix.Stat(root, &st) != nil || unix.Stat(root+"/..", &parent) != nil {
		return 0, false
	}
	if st.Dev == parent.Dev && st.Ino != parent.Ino {
		return 0, false
	}
	return st.Dev, true
}
