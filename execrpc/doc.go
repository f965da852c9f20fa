// Package execrpc carries commands over an rpc session (syncwire/rpc): the
// server side (computerd) registers its methods on the syncwire.Server
// beside the sync methods and runs them with
// an execrun.Runner; the client side (workspace-server) starts, re-attaches
// to and kills them.
//
// # Methods
//
// Start opens a call whose reply is the exec's id and runtime id, followed
// by a stream of events: output chunks (stdout or stderr) with their byte
// offset in the exec's combined log, then one exit event, then the end of
// the stream. Attach opens the same stream for an existing exec from an
// offset, so a caller that lost its session resumes where it stopped (or
// learns ELOG_TRUNCATED, or EEXEC_LOST when computerd restarted); from
// FromEnd it replays nothing, for a caller that wants only the exit. Kill
// signals the exec's process group. List answers the runner's running and
// retained execs (Info: a summary of the command line, state, exit, the
// offsets its log holds), one message each, at most MaxListed. A request
// may bound its exec's log (Request.LogCap) below the runner's cap.
//
// The exit event may carry the callee's feed head, read after the command
// ended (Options.Head): a caller that has already fetched through it skips
// the pull it would make after the command, which then changed nothing.
//
// Output flows under the session's per-stream credit, so a slow reader
// holds back only its own stream; the runner's bounded log is the buffer.
// A stream that falls so far behind that the log dropped its next bytes
// skips to the oldest byte still held (Subscription.SkipLost) and goes on
// to the exit: the events' offsets show the gap. Only an Attach at an
// offset already gone is ELOG_TRUNCATED.
//
// # Errors
//
// execrun's sentinels travel as wire codes this package registers with
// rpc (errors.go), so errors.Is(err, execrun.ErrBusy) holds on the
// caller's side: ErrBusy as EEXEC_BUSY, ErrExecLost as EEXEC_LOST,
// ErrLogTruncated as ELOG_TRUNCATED. A bad spec or working directory
// travels as EINVAL, an unknown id as ENOENT.
package execrpc
