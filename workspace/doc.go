// Package workspace is the orchestration of the authoritative server: the
// part of wsync that plays the seed's Durable Object. It owns the
// workspaces of one server, their stores, the order of their syncs, and the
// exec bracket; the wire and the container live behind the Remote
// interface, the HTTP API in package workspace/api.
//
// # Workspaces
//
// A Manager works over a data dir. Each workspace has a name
// ([a-z0-9][a-z0-9_-]{0,62}), a directory <data>/<name>/ holding its vfs
// store (store.db, opened on first use) and a registration in
// <data>/workspaces.json (written temp + fsync + rename): the computerd
// endpoint it syncs with, whether it has a token, its ignore list and its
// pending pull. The workspace named "default" is bound to the server's own
// computerd on every start (serve --computerd, --computerd-token-file).
//
// # Tokens and endpoints
//
// The API never reads a host path a caller names. A workspace created
// through it gets its computerd token by value; the token is written to
// <data>/<name>/computerd.token (mode 0600, temp + fsync + rename) and is
// never echoed, logged or put in the registry, which records only that it
// exists. Listings (Info) show neither tokens nor paths. Only the operator
// names files: serve's --computerd-token-file for the default workspace,
// kept in memory. An empty token is refused wherever one is read.
//
// Endpoints are ws:// or wss:// URLs with a host, no user info, query or
// fragment. Options.AllowEndpoints (serve --allow-endpoint) restricts them
// further: globs (path.Match) over the endpoint's host:port, the port
// filled in from the scheme; a created workspace naming any other endpoint
// is refused with ErrEndpointNotAllowed. The patterns match the name the
// caller gave, not the address it resolves to: list addresses to pin
// addresses.
//
// # Runtimes
//
// A workspace syncs with its default runtime (the endpoint and token
// above) and with the runtimes attached to it (Attach, Detach, Runtimes),
// each a computerd with its own endpoint and token (kept in
// <data>/<name>/runtimes/<runtime>.token, mode 0600, never in the
// registry). Each is its own sync peer of the store (Runtime.Peer:
// "computerd" for the default, "computerd@NAME" for an attached one) with
// its own Remote, built on first use by the RemoteFactory and closed on
// detach, and its own pending pull. The calls that sync with one runtime
// name it through Workspace.On; the Workspace's own Push, Pull, Exec,
// Verify, Repair and Status are the default runtime's. Tick pulls from
// every runtime, then pushes to every runtime, in one FIFO turn.
//
// # The FIFO
//
// Push, pull, tick, verify and the two sync phases of an exec, whatever
// runtime they sync with, go through one FIFO per workspace, in arrival order (seed "Concurrent mutators"). A call
// that fails releases its turn like any other, so nothing queued behind it
// is poisoned. The command of an exec does not hold the FIFO while it runs:
// overlapping execs and explicit syncs interleave between phases. Pure
// reads, and the files API's writes, do not queue: the store serialises its
// own writers, and a write made through the API reaches the container on
// the next push, tick or exec.
//
// # The exec bracket
//
// Exec is the seed's Lifecycle steps 1-6: push (a failed push fails the
// exec and nothing is spawned), the command (output handed to the caller as
// the container produces it), then a pull. The pull runs even when the
// caller has gone away, so what the command wrote comes back. When it
// fails, the command's result stands and the report says "pending" with the
// error. A command that changed nothing costs no pull: when the remote
// reports the container's feed head after the command (ExecResult.HasHead)
// and no pull is owed, a fetch cursor that covers the head means there is
// nothing to fetch, and the bracket ends without a round trip.
//
// # Detached execs
//
// StartExec runs the bracket's first half (the push) and starts the
// command with Remote.StartExec, answering with its exec id
// ("<container runtime id>:<n>") at once. A follower goroutine of the
// workspace (execs.go, under the background context Close cancels and
// waits for) then attaches from the end of the output, waits for the
// exit, publishes exec.exited and runs the bracket's second half
// (afterCommand) in the spec's sync mode, so the trailing pull is sliced,
// deferred and pending exactly as a foreground exec's. The table of
// detached execs (ExecInfo rows: id, runtime, command summary, state,
// exit, the pull's outcome) is persisted in the registry (Config.Execs)
// on every change; Open starts a follower for every row not settled, so a
// restarted server re-attaches by id and still pulls after a command that
// ended while it was down. An exec computerd no longer knows (a restart
// replaced its runtime: ErrExecLost; or it dropped the finished exec) is
// ExecStateLost, and its runtime still gets the pull it owed (deferred).
// The newest Options.ExecHistory settled rows are kept. Execs, ExecInfo,
// AttachExec, KillExec and WaitExec work on any exec of a runtime's
// container, foreground ones too; a detached one is found on its own
// runtime. At most Options.MaxExecs commands run at once per workspace,
// foreground and detached together: one more is ErrTooManyExecs
// (EEXEC_BUSY, 429) before anything syncs; a detached command holds its
// slot until its exit.
//
// # Pending pulls
//
// A pull that fails (after a command, explicit, or in a tick), the pull
// after a command run with ExecSpec.Sync = SyncDefer (the exec answers when
// the command exits), and the pull after a command that still has slices
// to go (it runs in slices of Options.PullSlice, each one FIFO turn, so a
// huge pull does not hold the FIFO for minutes) leave a pending record: the
// container may hold changes the server has not pulled. Each runtime with
// a record has a background puller (puller.go) that pulls slice after
// slice until the feed is drained, at once for a deferred or cut-short
// pull and after a backoff (Options.RetryBackoff, doubling up to 60 times)
// for a failed one; Open restarts it for every record the registry holds. The record fences every write to the container: a push, the push
// of an exec and a repair first complete the pending pull in the same FIFO
// turn, and when that pull fails again they fail with ErrPendingPull
// (EPENDING, HTTP 409) and the container is not written, so no push
// replaces a container path whose changes have not been pulled. Writes
// through the files API still commit on the server and wait in the push
// queue. A successful pull clears the record. It is kept in the registry
// (written on every change), so it survives a restart and Status shows it.
// A server that stopped while a command ran never recorded the pull it
// owed, so the first push after a start (or exec, or repair) pulls first
// in the same way. A claim of a shared workspace (serve --object-store)
// owes a pull of every runtime at once (catchUp): the store it claimed
// may be the object store's copy, a replication lag behind the old
// owner's last pull, and the container still holds what that pull
// brought. The record names the exec and the runtime that ran it:
// if the container's runtime changed before the pull succeeded, the record
// is reported as abandoned (the pull took whatever the new runtime holds).
// A path the server changed too is a conflict of that pull (see below).
// A pull the workspace's quota stopped is pending in the quota state
// (quota.go): not retried on a timer, resumed when SetQuota changes it.
//
// A pull that would delete more than Options.MassDelete allows (half the
// workspace's live paths and at least 1,000, by default) stops before its
// first deletion (massdelete.go) and leaves its record paused
// (PendingPaused): not retried in the background, fencing writes to the
// container like a failed one, until a pull with
// PullOptions.AllowMassDelete applies it.
//
// # Trash
//
// Each workspace store keeps a trash (Options.Trash, trash.go): what a pull
// or the files API deleted or overwrote, restorable for the retention with
// TrashRestore as new server changes that the next push carries.
//
// # Conflicts
//
// The server's store detects conflicts in the apply of a pull and settles
// each by the workspace's policy (Config.ConflictPolicy: keep-both, the
// default, server-wins or container-wins; set at Create, by
// SetConflictPolicy, and for the default workspace by
// Options.DefaultConflictPolicy), recording it in the store. Every
// RemoteFactory that runs the real driver gives it ConflictOptions (the
// policy, and the runtime's side for the copies' names); changing the
// policy closes the remotes so they are built again with it. A pull that
// recorded conflicts pushes to the runtime in the same FIFO turn, so its
// container gets the server's version and the copy at once; its report
// counts them (SyncReport.Conflicts, ExecReport.Conflicts). Conflicts lists
// the records as the API shows them (ConflictInfo); ResolveConflict
// settles one, with ordinary server writes that the next push carries.
//
// # Events
//
// Each workspace has an event log (Events, package workspace/events: in
// memory, bounded, replayable by id), and what it does is published there
// from one place each: a sync call's start, progress and end from push and
// pull (beginSync, the progress hook in progress.go, the span's finish;
// a tick is a sync whose pulls and pushes name it as their parent), a
// command's start and exit from the exec bracket (publishExecStarted and
// publishExecExited, which a detached command calls too), a pending pull
// recorded (updatePending) and settled (resolvePending), the conflicts a
// pull recorded (with its end), verify verdicts (verify), and a runtime's
// session coming up and going away, from a Remote that implements
// SessionNotifier (the real one does). EventTypes names the types; the
// HTTP API serves the log as Server-Sent Events.
//
// # Ignored paths
//
// The ignore patterns (gitignore syntax, vfs.Ignore) in force are
// Workspace.Patterns: the configured list (default ["node_modules"], a
// workspace's own list replaces it, an empty list ignores nothing; Create
// and SetIgnore set it) followed by the lines of the server store's
// IgnoreFile (/.wsyncignore). They are given to every push, pull, verify
// and repair, which send them on the wire, and applied by the files API:
// ignored paths are invisible (readdir omits them, stat and read give
// ENOENT) and cannot be written. ignore.go says when a change takes
// effect and why it loses nothing.
//
// # Errors
//
// The HTTP API's error codes are one table, apiCodes in errors.go: each
// row is a code, the status of the answer and the sentinel. The API
// answers with it (APIError) and the Go client decodes with it
// (APISentinel), so errors.Is holds on both sides for the same sentinels.
// A Remote returns what failed on computerd's side as a *PeerError with the
// wire code: the table renames the codes that would be taken for the
// caller's own (EAUTH is EPEER_AUTH, 502: computerd refused the server's
// token; ESHUTDOWN is EPEER_UNAVAILABLE, 503; EEXEC_LOST is ErrExecLost,
// 410, and ELOG_TRUNCATED ErrLogTruncated, 416) and answers 502 with the
// wire's code for the rest that has no row of its own.
package workspace
