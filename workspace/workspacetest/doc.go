// Package workspacetest holds a FAKE workspace.Remote for the orchestration
// tests of package workspace, its HTTP API and the workspace-server CLI.
//
// # What the fake is
//
// Fake joins the server's vfs store to a second, in-process "container"
// vfs store with the real sync: a syncwire.Driver on the server store and a
// syncwire.Server (with the convergence methods) on the container store,
// over an in-process pipe (rpc.Pipe). Push, Pull and Verify are therefore
// the real rules, not a model of them; only Exec is played: it runs a Go
// function (RunFunc) that mutates the container store and emits output.
// Failures can be injected per call.
//
// It has no WebSocket, no computerd, no FUSE mount and no processes: it
// tests the orchestration (the exec bracket, the FIFO, pending pulls, the
// files API, the CLI). The remotetest suite holds it to the same contract
// as the real remote. The end-to-end tests with real
// binaries and a real mount live in the repository's tests/ directory.
package workspacetest
