package execrun

import (
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// States of an exec (Info.State).
const (
	StateRunning  = "running"   // the leader has not been reaped
	StateExited   = "exited"    // it exited by itself (any code), or a signal it did not get from us killed it
	StateKilled   = "killed"    // Kill or Shutdown signalled the group before it ended
	StateTimedOut = "timed_out" // its timeout expired and the runner terminated the group
)

// Bounds of the command line Info carries: List answers for every running
// and retained exec, so what it holds of each is cut to a summary.
const (
	MaxInfoArgs   = 32
	MaxInfoArgLen = 256
	MaxInfoShell  = 1024
)

// Info describes a running or retained exec, as List shows it.
type Info struct {
	ID string
	// Argv and Shell are the command line, cut to MaxInfoArgs arguments of
	// MaxInfoArgLen bytes and MaxInfoShell bytes (Truncated says so).
	Argv      []string
	Shell     string
	Truncated bool
	// Cwd is the working directory relative to the root ("" is the root).
	Cwd     string
	Pid     int
	Started time.Time
	// Ended is zero while the exec runs.
	Ended time.Time
	State string
	// Exit is how it ended; nil while it runs.
	Exit *ExitStatus
	// LogStart and LogEnd are the offsets the output log holds: LogEnd
	// counts every byte the exec wrote, LogStart the first still retained.
	// LogCap is the log's bound.
	LogStart, LogEnd int64
	LogCap           int64
}

// summarize is the static part of an exec's Info.
func summarize(s Spec, c *command) Info {
	info := Info{LogCap: c.logCap, Cwd: c.dir}
	info.Shell, info.Truncated = cut(s.Shell, MaxInfoShell)
	for i, a := range s.Argv {
		if i == MaxInfoArgs {
			info.Truncated = true
			break
		}
		a, short := cut(a, MaxInfoArgLen)
		info.Argv = append(info.Argv, a)
		info.Truncated = info.Truncated || short
	}
	return info
}

func cut(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	return s[:n], true
}

// Info describes the exec now.
func (e *Exec) Info() Info {
	info := e.info
	info.Argv = slices.Clone(info.Argv)
	info.ID, info.Pid, info.Started = e.id, e.pid, e.begin
	info.Cwd = e.r.relative(e.info.Cwd)
	e.mu.Lock()
	defer e.mu.Unlock()
	info.LogStart, info.LogEnd = e.out.start, e.out.end
	info.State = StateRunning
	if e.exit != nil {
		st := *e.exit
		info.Exit, info.Ended = &st, e.ended
		switch {
		case st.TimedOut:
			info.State = StateTimedOut
		case st.Killed:
			info.State = StateKilled
		default:
			info.State = StateExited
		}
	}
	return info
}

// List describes the running and retained execs, oldest first: at most
// Options.MaxRunning plus Options.Retain of them.
func (r *Runner) List() []Info {
	r.mu.Lock()
	r.expireLocked()
	execs := make([]*Exec, 0, len(r.execs))
	for _, e := range r.execs {
		execs = append(execs, e)
	}
	r.mu.Unlock()
	slices.SortFunc(execs, func(a, b *Exec) int { return compareSeq(a.seq, b.seq) })
	out := make([]Info, len(execs))
	for i, e := range execs {
		out[i] = e.Info()
	}
	return out
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// relative is the resolved directory dir relative to the root.
func (r *Runner) relative(dir string) string {
	rel, err := filepath.Rel(r.root, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return ""
	}
	return rel
}
