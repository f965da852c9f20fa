package workspace

import (
	"context"
	"syscall"
	"time"

	"github.com/wsync/wsync/watermark"
)

// Remote is the sync and exec side of one workspace: the session with its
// computerd. The Manager never calls it concurrently for one workspace's
// sync phases (Push, Pull, Verify and the phases around Exec are serialised
// by the workspace FIFO), but Exec and Status may overlap with them and with
// each other, so an implementation must be safe for concurrent use.
//
// The implementation that talks the sync wire lives with the wire driver;
// this package declares only what it consumes. A failure on computerd's
// side is a *PeerError carrying its wire code ("EAUTH", "EEXEC_BUSY"), so
// the API reports it as computerd's and not the caller's. An
// implementation that holds connections may implement io.Closer; the
// Manager closes it when it closes. Every implementation runs the suite of
// package workspace/remotetest.
type Remote interface {
	// Push sends every server-side change the container has not applied
	// (seed Lifecycle step 1) and returns once the container has committed
	// them and the push watermark is persisted. On error nothing the server
	// holds is lost; the next Push resends what was not acknowledged.
	// opts.Progress, when set, is told after each committed batch. The
	// paths opts.Ignore matches stay on the server (the workspace gives
	// the patterns in force: nil would mean the default); a push ignores
	// opts.Budget.
	Push(ctx context.Context, opts SyncOptions) (SyncReport, error)

	// Pull fetches the container's changes after the fetch cursor and
	// applies them to the server store (steps 4-6), checkpointing the cursor
	// per committed batch, so an error or a crash resumes where it stopped.
	// opts.Ignore is the gitignore patterns (vfs.Ignore) whose paths stay
	// in the container; nil means the default ["node_modules"], an empty
	// non-nil list ignores nothing. The remote sends the list with the
	// fetch and applies it to what arrives, so the container and the
	// server match by one list. A pull stops after the batch that reaches opts.Budget and
	// reports More: the rest of the feed waits for the next pull.
	Pull(ctx context.Context, opts SyncOptions) (SyncReport, error)

	// Exec runs one command in the container and blocks until it exits.
	// The result carries the container's feed head (ExecResult.HasHead)
	// only when the remote can vouch for it; one that cannot leaves it out
	// and the workspace pulls after every command.
	// out is called with each piece of output, in the order the container
	// produced it, from one goroutine at a time; Exec does not return before
	// its last call. An error means the command's fate is unknown or it never
	// started; an exit status (any code, any signal) is a result, not an
	// error. Cancelling ctx kills the command. Exec does no syncing: the
	// workspace brackets it with Push and Pull.
	Exec(ctx context.Context, spec ExecSpec, out func(ExecEvent)) (ExecResult, error)

	// StartExec starts one command in the container and returns its exec
	// id ("<container runtime id>:<n>") once it runs, without waiting for
	// it: the command lives until it exits, is killed or times out,
	// whatever becomes of ctx, the caller or the session. Like Exec, it
	// does no syncing.
	StartExec(ctx context.Context, spec ExecSpec) (id string, err error)

	// AttachExec passes the output of exec id to out from byte offset from
	// (ExecFromEnd: none of what it wrote so far), in order, with each
	// piece's offset, follows it as the command writes, and returns how
	// the command ended (ExecResult.OutputBytes: the offset of its end).
	// Cancelling ctx stops following; the command runs on. A session that
	// drops is re-attached where it stopped. Errors: ErrExecLost for an id
	// of a container runtime that is gone (computerd restarted),
	// vfs.ErrNotExist for one its runner does not know (or no longer
	// retains), ErrLogTruncated for an offset the bounded log has dropped,
	// vfs.ErrInvalid for one past the output's end. Any exec of the
	// container may be attached, a foreground Exec's too.
	AttachExec(ctx context.Context, id string, from int64, out func(ExecEvent)) (ExecResult, error)

	// KillExec sends sig to the process group of exec id; one that has
	// ended is not an error. Errors as AttachExec's.
	KillExec(ctx context.Context, id string, sig syscall.Signal) error

	// ListExecs describes the container's running and recent commands,
	// oldest first, and names the container runtime they belong to (an id
	// of another is lost). Cwd is a workspace path; Runtime and the fields
	// of a detached exec are the workspace's to fill in.
	ListExecs(ctx context.Context) (runtimeID string, execs []ExecInfo, err error)

	// Status reports both sides' watermarks, the connection state and the
	// container's runtime id. It must not block on a sync in progress and
	// should answer from the last known state when the peer is unreachable
	// (with Connected false and LastError set) rather than fail.
	Status(ctx context.Context) (RemoteStatus, error)

	// Verify compares both sides' Merkle roots and reports the verdict. A
	// remote that cannot verify returns ErrNotSupported.
	Verify(ctx context.Context) (VerifyReport, error)
}

// RemoteFactory builds the Remote of one runtime of a workspace: it syncs
// the workspace's store with rt's computerd as the peer rt.Peer(). The
// Manager calls it lazily, on the first call that needs the remote, and
// keeps the result until the runtime is detached or the Manager closes; an
// error is returned to that caller and the next call tries again. A
// runtime without an endpoint never reaches the factory (ErrNoRemote).
type RemoteFactory func(ws *Workspace, rt Runtime) (Remote, error)

// SyncOptions are the options of one push or pull call.
type SyncOptions struct {
	// Ignore is the ignore patterns of a push or a pull (see Remote.Pull):
	// the workspace gives its Patterns.
	Ignore []string
	// Budget bounds one pull; its zero value bounds nothing.
	Budget Budget
	// Progress, when set, is called after every committed batch with the
	// totals of the call so far, from the goroutine that runs the call and
	// never after the call returned. It must not block for long: the sync
	// waits for it.
	Progress func(Progress)
	// Guard, for a pull, is its deletion safety: the pull counts the
	// deletes of live paths its feed holds before it applies the first,
	// and stops there with the error Guard.Refuse returns (massdelete.go).
	// Nil: no check. A push ignores it.
	Guard DeleteGuard
}

// DeleteGuard decides whether a pull may apply the deletions its feed
// holds (SyncOptions.Guard). Paths are store form ("src/a.go").
type DeleteGuard interface {
	// Live returns how many of paths name a live node of the server.
	Live(ctx context.Context, paths []string) (int, error)
	// Refuse returns the error that pauses a pull that deletes deletes
	// live paths, or nil while it may go on.
	Refuse(ctx context.Context, deletes int) error
}

// Budget bounds one pull call: it stops after the first committed batch
// that reaches any bound that is set (zero: unbounded), so every call
// moves at least one batch. The fetch cursor follows the committed
// batches, so the next pull goes on where this one stopped.
type Budget struct {
	Entries int           // entries received
	Bytes   int64         // chunk bytes fetched
	Wall    time.Duration // time since the call started
}

// IsZero reports whether b bounds nothing.
func (b Budget) IsZero() bool { return b == Budget{} }

// Progress is how far one sync call has gone: totals so far, of its
// current Op. A push that bootstraps an empty container reports its
// "bootstrap" first, then its "push", each from zero: the report adds the
// last totals of each up.
type Progress struct {
	// Op is "push", "pull" or "bootstrap" (a snapshot sent to an empty
	// container, inside a push).
	Op string `json:"op"`
	// Entries counts the entries moved, applied or not: the last
	// progress's Entries is the report's Entries + Skipped + Deferred. A
	// bootstrap counts its records staged (Total's unit).
	Entries int `json:"entries"`
	// Objects, Bytes and Batches are the report's: chunks that crossed
	// the wire, their bytes, batches (a bootstrap's pages).
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
	Batches int   `json:"batches"`
	// Total is the number of entries the call will move when it is known
	// (a snapshot's record count), else 0.
	Total int `json:"total,omitempty"`
}

// Follows reports whether p is a later report of the same run as prev:
// the same Op, more batches. An observer of a call that makes several
// runs (a push that bootstraps, then pushes; a tick's pulls and pushes,
// one per runtime; an exec's push and pull; a repair's) tells them apart
// with it: every run starts from zero.
func (p Progress) Follows(prev Progress) bool { return p.Op == prev.Op && p.Batches > prev.Batches }

// SyncReport is what one push or pull moved.
type SyncReport struct {
	// Entries is the number of change entries the receiver applied (entries
	// that already matched are counted in Skipped).
	Entries int `json:"entries"`
	Skipped int `json:"skipped,omitempty"`
	// Objects and Bytes count the chunks sent over the wire and their
	// uncompressed bytes: chunks the receiver already had are not counted.
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
	Batches int   `json:"batches,omitempty"`
	// Rebaselined: a watermark was reset on this call (a replaced or reset
	// container, or a tripped cross-side invariant) and the sync started
	// over from the start of the feed.
	Rebaselined bool `json:"rebaselined,omitempty"`
	// RuntimeID is the container runtime the call talked to. A pending pull
	// is fenced to it.
	RuntimeID string        `json:"runtime_id,omitempty"`
	Duration  time.Duration `json:"duration_ns"`
	// Conflicts counts the conflicts a pull recorded (see
	// Workspace.Conflicts), and ConflictPaths names the first
	// MaxConflictPaths of them (workspace form).
	Conflicts     int      `json:"conflicts,omitempty"`
	ConflictPaths []string `json:"conflict_paths,omitempty"`
	// Deferred counts the entries a push left for later: the container had
	// changed them and the server had not pulled that yet. They go again
	// after the next pull, where they apply or become conflicts.
	Deferred int `json:"deferred,omitempty"`
	// More: a pull stopped on its Budget before the end of the container's
	// feed; the next pull fetches the rest.
	More bool `json:"more,omitempty"`
}

// MaxConflictPaths bounds SyncReport.ConflictPaths.
const MaxConflictPaths = 16

// ExecSpec is one command for the container. Exactly one of Argv and Shell.
type ExecSpec struct {
	Argv  []string `json:"argv,omitempty"`
	Shell string   `json:"shell,omitempty"`
	// Cwd is a workspace path ("/src", "src"); empty is the workspace root.
	// The remote maps it to the container's mount.
	Cwd string `json:"cwd,omitempty"`
	// Env entries K=V are added to the container's minimal environment.
	Env []string `json:"env,omitempty"`
	// Stdin is given to the command on its standard input (nil: /dev/null).
	Stdin []byte `json:"stdin,omitempty"`
	// Timeout bounds the run; zero is the container's default.
	Timeout time.Duration `json:"timeout_ns,omitempty"`
	// User runs the command under these ids (nil: computerd's own).
	User *ExecUser `json:"user,omitempty"`
	// LogCap bounds the bytes of output the container keeps for re-attach
	// (zero: computerd's cap, 8 MiB by default, which is also the most it
	// accepts).
	LogCap int64 `json:"log_cap,omitempty"`
	// Sync is when the caller hears of the command's end: SyncWait (or
	// empty), after the pull that brings back what it wrote; SyncDefer, at
	// once, with the pull running after the reply. Not sent to the
	// container.
	Sync string `json:"sync,omitempty"`
}

// Post-command sync modes (ExecSpec.Sync).
const (
	SyncWait  = "wait"
	SyncDefer = "defer"
)

// ExecUser is the uid and optional gid an exec runs as (--user UID[:GID]).
type ExecUser struct {
	Uid uint32  `json:"uid"`
	Gid *uint32 `json:"gid,omitempty"`
}

// Output streams.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// ExecEvent is one piece of a command's output.
type ExecEvent struct {
	Stream string `json:"stream"` // Stdout or Stderr
	Data   []byte `json:"data"`
	// Offset is where Data starts in the command's output log (both
	// streams together): attach there to resume after it.
	Offset int64 `json:"offset,omitempty"`
}

// ExecFromEnd, as AttachExec's offset, replays nothing: only the output to
// come and the exit.
const ExecFromEnd int64 = -1

// ExecResult is how a command ended.
type ExecResult struct {
	ExecID    string `json:"exec_id,omitempty"`
	RuntimeID string `json:"runtime_id,omitempty"`
	// ExitCode is the command's exit code, or 128+n when signal n killed it.
	ExitCode int           `json:"exit_code"`
	Signal   int           `json:"signal,omitempty"`
	TimedOut bool          `json:"timed_out,omitempty"`
	Killed   bool          `json:"killed,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	// OutputBytes counts every byte of output the command wrote (the
	// offset of its log's end), when the remote knows it.
	OutputBytes int64 `json:"output_bytes,omitempty"`

	// HasHead: Head is the container's feed head after the command (its
	// rev once everything the command wrote was committed, files a process
	// it left behind still holds open included), as the remote vouches for
	// it: of the container feed the runtime's fetch cursor follows, with no
	// reconnect since the push before the command. The exec bracket skips
	// its pull when the server has fetched through it. Not part of the API.
	HasHead bool  `json:"-"`
	Head    int64 `json:"-"`
}

// Cursor is a watermark.Cursor in JSON form: {"rev": 5, "path": null} is
// the full cursor at rev 5, {"rev": 5, "path": "a/b"} a partial one.
type Cursor struct {
	Rev  int64   `json:"rev"`
	Path *string `json:"path"`
}

// CursorOf converts a watermark cursor to its JSON form.
func CursorOf(c watermark.Cursor) Cursor {
	if !c.Partial {
		return Cursor{Rev: c.Rev}
	}
	p := c.Path
	return Cursor{Rev: c.Rev, Path: &p}
}

// Watermark converts back.
func (c Cursor) Watermark() watermark.Cursor {
	if c.Path == nil {
		return watermark.At(c.Rev)
	}
	return watermark.Within(c.Rev, *c.Path)
}

// SideStatus is one side's position.
type SideStatus struct {
	StoreID    string `json:"store_id,omitempty"`
	RuntimeID  string `json:"runtime_id,omitempty"`
	CurrentRev int64  `json:"current_rev"`
	// Served is the highest rev the side's store handed out as a place in
	// its feed (vfs.Store.Served): a peer's cursor past it met a copy of
	// the store restored behind it.
	Served int64 `json:"served"`
	// Push, Fetch and AppliedPush are the side's watermarks for its peer
	// (see package watermark).
	Push        Cursor `json:"push"`
	Fetch       Cursor `json:"fetch"`
	AppliedPush Cursor `json:"applied_push"`
}

// RemoteStatus is what Remote.Status reports.
type RemoteStatus struct {
	Connected bool `json:"connected"`
	// State is a word for humans: "connected", "disconnected", "connecting".
	State     string     `json:"state"`
	RuntimeID string     `json:"runtime_id,omitempty"`
	Server    SideStatus `json:"server"`
	Container SideStatus `json:"container"`
	LastError string     `json:"last_error,omitempty"`
}

// VerifyReport is a convergence verdict.
type VerifyReport struct {
	Converged     bool   `json:"converged"`
	ServerRoot    string `json:"server_root,omitempty"`
	ContainerRoot string `json:"container_root,omitempty"`
	// Differences holds the first differing paths (workspace form, leading
	// "/"), bounded by the remote.
	Differences []string  `json:"differences,omitempty"`
	CheckedAt   time.Time `json:"checked_at"`
}
