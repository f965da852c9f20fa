// Package execrun runs the commands computerd executes inside the mount: one
// process group per exec, output kept in a bounded log that callers attach to
// and replay, and nothing left running once an exec is over. It has no network
// code; the wire layer maps its calls and sentinel errors to exec RPCs.
//
// # Execs and ids
//
// A Runner belongs to one runtime: a daemon process start, named by a random
// UUID unless Options.RuntimeID gives one. Exec ids are "<runtime id>:<seq>",
// so an id issued before a restart is recognised as such and answered with
// ErrExecLost rather than confused with a new exec; an unknown id of this
// runtime is ErrNotFound. At most Options.MaxRunning execs run at once
// (default 16); Start beyond that is ErrBusy, never a queue, so the caller
// decides whether to wait.
//
// A Spec gives either Argv (looked up in the exec's PATH) or Shell (run by
// /bin/sh -c), a working directory, extra environment, stdin, a timeout
// (default 10 minutes, at most 1 hour) and optionally the credentials to run
// under. A command that is not found is an error from Start (exec.ErrNotFound),
// not an exec with status 127.
//
// # Working directory and environment
//
// Cwd is relative to the mount root or absolute inside it; empty means the
// root. It is cleaned, symlinks are resolved, and anything that lands outside
// the root (through "..", an absolute path elsewhere, or a symlink in the
// workspace pointing out of it) is refused with ErrBadCwd, as is a path that
// does not exist or is not a directory. Absolute paths are container paths
// (/workspace/src), not workspace paths (/src): translating those is the
// caller's job. The check keeps callers from running in the wrong place; it
// is not a sandbox, since the command may cd wherever it likes.
//
// The environment is minimal, because the daemon's own holds its token: PATH
// (the daemon's, or the usual /usr/local/sbin:...:/bin), LANG, LC_ALL and TZ
// when the daemon has them, HOME, USER and LOGNAME from the passwd entry of the
// uid the exec runs as (HOME=/ when there is none), and PWD. Spec.Env entries
// replace these by key; the last entry for a key wins.
//
// The command starts in its directory with no shell in between: the thread
// that forks it enters the directory first (exec.go says why the child
// itself must not). Binaries on the mount, --user execs and a daemon that
// may not unshare its working directory go through a shim shell that does
// the cd after its own execve; there argv[0] becomes the resolved path.
//
// # Output log
//
// Stdout and stderr are read from two pipes as the process writes them and
// appended to the exec's log as events (stream, bytes), each read one event of
// at most 32 KiB. Offsets count the bytes of both streams together and never
// go back; the order between the two streams is the order the runner read
// them, not necessarily the order they were written. The log keeps the newest
// Options.LogCap bytes (default 8 MiB) and drops the oldest; a Spec may ask
// for a smaller log (Spec.LogCap), never a larger one (ErrBadSpec).
//
// Attach(id, from) gives a Subscription that returns the events from offset
// from, then live ones, then one exit event with the ExitStatus, then io.EOF.
// From FromEnd it replays nothing: a caller that wants only the exit (a
// waiter) attaches there.
// Subscribers read from the log itself, each at its own pace: a slow one
// never blocks the process or another subscriber, it only risks falling more
// than the cap behind, which is ErrLogTruncated (a *TruncatedError naming the
// oldest offset still held, where it can re-attach); a live stream that
// must go on moves there with SkipLost.
//
// # Process groups and termination
//
// Each exec runs in its own process group (its leader's pid), and every
// signal goes to the whole group. Kill sends the caller's signal. A timeout
// sends SIGTERM, then SIGKILL after Options.KillGrace (default 2 s) if the
// leader is still alive. When the leader exits, by itself or not, whatever it
// left in its group is sent SIGKILL: background children do not outlive the
// exec. The exec is reported finished only once no process of the group
// remains, zombies included.
//
// The group is signalled only while the leader is unreaped: the runner waits
// for its exit without reaping it (waitid WNOWAIT), so its pid, and with it the
// group id, cannot be reused by an unrelated process while signals may still
// be sent. New makes the daemon a child subreaper, so orphans of an exec's
// leader are reparented to it and reaped by group rather than left to an init
// that may not reap them (a container's PID 1 often does not). A side effect:
// orphans of other children of the daemon become its zombies too.
//
// A process that leaves the group (setsid, setpgid) is out of reach; its
// output is read for a short drain grace (250 ms) after the group is gone and
// dropped after. The leader gets SIGKILL if the daemon dies (Pdeathsig), so a
// crashed daemon does not leave commands running under an id that is lost.
//
// ExitStatus has the exit code, or 128+n with Signal n when the leader was
// killed by a signal, the duration, and whether the timeout (TimedOut) or a
// Kill or Shutdown (Killed) ended it.
//
// # Retention and shutdown
//
// Finished execs stay attachable so a caller that reconnects can replay their
// output and status: the newest Options.Retain (default 64) of them, holding
// at most Options.RetainBytes of output together (default 64 MiB), for at
// most Options.RetainFor after their end (default 1 hour), oldest evicted
// first. An evicted id is ErrNotFound. Shutdown refuses new execs,
// terminates the running ones as a timeout would and waits for them;
// finished execs stay attachable.
//
// List describes every running and retained exec, oldest first (Info): its
// id, a summary of its command line (at most MaxInfoArgs arguments of
// MaxInfoArgLen bytes, MaxInfoShell bytes of a shell script), working
// directory, pid, start and end, state (StateRunning, StateExited,
// StateKilled, StateTimedOut), exit status, and the offsets its log holds.
//
// # Errors and metrics
//
// Sentinels are in errors.go: ErrBusy, ErrExecLost, ErrLogTruncated,
// ErrNotFound, ErrBadCwd and ErrBadSpec (both also invalid arguments,
// os.ErrInvalid and EINVAL), ErrClosed. Stats counts started, running,
// finished, killed, timed out and busy-refused execs of one Runner; the same
// counts go to the default Prometheus registry as wsync_exec_<what>_total
// (and the gauge wsync_exec_running).
package execrun
