// Package client is the Go client of the workspace-server HTTP API (see
// docs/API.md): one typed method per route.
//
// Events follows a workspace's event stream, reconnecting with
// Last-Event-ID when the connection drops, so it misses nothing the
// server still retains.
//
// Errors from the server come back as *Error, which carries the HTTP
// status and the errno name and unwraps to the sentinel the workspace's
// error registry gives the code (workspace.APISentinel), so
// errors.Is(err, vfs.ErrNotExist) works on the client as on the server;
// ENOTCONN unwraps to workspace.ErrNoRemote, EOPNOTSUPP to
// workspace.ErrNotSupported, EAUTH to ErrUnauthorized, EBUSY and
// EEXEC_BUSY to workspace.ErrBusy (retry later), EPENDING to
// workspace.ErrPendingPull, and any 502 (computerd failed: EPEER_AUTH,
// or a sync wire code) to workspace.ErrPeer.
//
// StartExec, AttachExec, Execs, ExecInfo, KillExec and WaitExec are the
// exec-by-id calls: a detached command's id, its output replayed from an
// offset, the list, a signal, its end. EEXEC_LOST unwraps to
// workspace.ErrExecLost and ELOG_TRUNCATED to workspace.ErrLogTruncated.
//
//	c, err := client.New("http://127.0.0.1:8080", token)
//	ws := c.Workspace("default")
//	rep, err := ws.Exec(ctx, workspace.ExecSpec{Argv: []string{"make"}}, func(ev workspace.ExecEvent) {
//		os.Stdout.Write(ev.Data)
//	})
package client
