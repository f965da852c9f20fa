// Package workspacetest holds a FAKE workspace.Remote for the orchestration
// tests of package workspace, its HTTP API and the workspace-server CLI.
//
// # What the fake is
//
// Fake joins the server's vfs store to a second, in-process "container"
// vfs store. Push copies the server's change feed into the container store,
// Pull copies the container's feed back (with the caller's ignore list),
// both through the real vfs change feed and Apply, chunks copied by hash as
// the wire would; Exec runs a Go function (RunFunc) that mutates the
// container store and emits output. Failures can be injected per call.
//
// It has no wire, no computerd, no FUSE mount and no processes: it tests
// the orchestration (the exec bracket, the FIFO, pending pulls, the files
// API, the CLI), not the sync protocol. The end-to-end tests with real
// binaries and a real mount live in the repository's tests/ directory.
package workspacetest
