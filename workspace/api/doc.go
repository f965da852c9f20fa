// Package api is the HTTP API of workspace-server, versioned under /v1/ and
// documented route by route in docs/API.md.
//
// # Auth
//
// Every route but GET /health needs "Authorization: Bearer TOKEN". The
// token is compared in constant time (both sides hashed, so not even its
// length leaks) and never logged; a refusal is 401 with errno EAUTH.
//
// # Errors
//
// Every error is a JSON body {"error": message, "errno": "ENOENT"} with a
// status that follows the errno, both from the workspace's error registry
// (workspace.APIError, the one table the Go client decodes with too): 404
// ENOENT, 409 EEXIST, ENOTEMPTY and EPENDING (a push fenced by a pending
// pull), 400 for bad arguments (EINVAL, ENOTDIR, EISDIR, ...), 401 EAUTH
// (the caller's token), 403 EPERM (an endpoint outside --allow-endpoint),
// 413 EFBIG (a body over the limit), 429 EBUSY and EEXEC_BUSY (the
// computerd session or its runner is at its limit: nothing was done, retry;
// with Retry-After), 501 EOPNOTSUPP, 503 ENOTCONN (no remote), ESHUTDOWN
// (the server is closing) and EPEER_UNAVAILABLE (no session with
// computerd), 502 for computerd's other failures (EPEER_AUTH: it refused
// the server's token; or the wire's own code, such as EPROTOCOL), 500
// otherwise (EIO).
//
// # Workspaces
//
// POST /v1/workspaces takes a workspace's computerd token by value
// (computerd_token) and refuses token_file: the API never reads a host
// path a caller names. Registrations are shown as workspace.Info: no
// token, no path.
//
// # Bounds
//
// Every body is read through a limit before it is decoded (JSON 1 MiB,
// exec 4 MiB, file writes 4 GiB streamed to the store); exec requests are
// held to the container's own limits before anything syncs. A listing
// streams its JSON array as the walk reads the tree, so what the server
// holds does not grow with the answer.
//
// # Files and sync
//
// /v1/workspaces/{ws}/files/{path...} reads (Range), writes (atomic
// replace) and deletes bytes; .../fs/* are the metadata calls. They act on
// the server store only; .../push, .../pull, .../tick and .../exec move
// changes to and from the container, through the workspace's FIFO. Exec
// answers with a stream of NDJSON frames so output is shown as it is made.
//
// # Streams and connections
//
// Every stream (exec output, a sync's NDJSON, events) writes each frame
// under a deadline of its own (Options.StreamWriteTimeout): a caller that
// stops reading for that long is gone, as one that hung up, and the call
// it was reading (a command, a sync) is cancelled, so it cannot hold a
// command slot or the workspace's FIFO. Request bodies must keep coming
// (Options.BodyReadTimeout: 408 ETIMEDOUT). Configure sets the rest on the
// http.Server: header and idle timeouts, EndStreams at shutdown; it sets
// no WriteTimeout, which would cut every long stream.
//
// # Detached execs
//
// .../execs (execs.go) starts a command detached (POST: 201 with its id),
// lists the commands of every runtime (GET), and by id describes one,
// streams its output from ?from=N (or end) as NDJSON frames with their
// offsets, kills it (POST .../kill {"signal": "TERM"}) and waits for it
// (GET .../wait, answered once the pull after a detached command is done).
// Ids, offsets and signals are checked before anything else: 400 EINVAL; an
// id of a replaced container is 410 EEXEC_LOST, an offset the log dropped
// 416 ELOG_TRUNCATED, a command beyond the workspace's limit 429
// EEXEC_BUSY.
//
// # Events
//
// GET .../events serves the workspace's event log as Server-Sent Events
// (events.go): from Last-Event-ID or ?after=, filtered by ?types=, flushed
// event by event, with a comment every heartbeat. The log is the only
// buffer: a client whose write does not finish in the write timeout is
// dropped (it reconnects and loses nothing retained), the streams of a
// workspace are bounded (429 EBUSY), and none holds a FIFO turn. The
// server never ends a stream by itself, so a server that shuts down calls
// EndStreams first (serve registers it with http.Server.RegisterOnShutdown).
//
// # Conflicts
//
// GET .../conflicts lists the conflicts the server's pulls recorded (the
// open ones; ?all=1 adds the resolved), POST .../conflicts/resolve settles
// one (workspace.Workspace.ResolveConflict) and PUT .../conflict-policy
// changes the workspace's policy; conflicts.go holds the three.
package api
