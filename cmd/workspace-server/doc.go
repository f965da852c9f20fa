// Command workspace-server is the authoritative side of wsync: `serve` runs
// the server (the workspace stores, the sync with computerd, the HTTP API
// of docs/API.md), and every other verb is a client of a running server.
//
// # Layout
//
// main.go dispatches on the verb; each verb has a file of its own with its
// own flag.FlagSet, parsed after the verb, flags and arguments in any order
// ("--" ends the flags; exec's flags end at the command). common.go holds
// the client flags every verb shares (--server, --workspace, --token-file,
// with their WSYNC_* twins), the exit codes and the error reporting, which
// names the errno ("(ENOENT)") on stderr. The verbs call the Go client,
// package workspace/client.
//
// # serve and its seams
//
// serve.go builds the workspace.Manager and the api.Server and shuts both
// down on SIGTERM or SIGINT. It reaches the sync driver and the embedded
// computerd through the seams of hooks.go (newRemote, startEmbedded), which
// the CLI tests replace with a fake remote and a computerd that is not
// there.
//
// # Tests
//
// The tests run the verbs in-process against an httptest server over a
// Manager whose remotes are fakes (package workspace/workspacetest); the
// tests that start real binaries and a real mount are in tests/.
package main
