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
// # Exec by id
//
// exec.go runs a command in the foreground (its output streamed, its exit
// code the CLI's, Ctrl-C kills it) or, with --detach, starts it and prints
// its id. execid.go has the verbs by id: exec attach ID [--from OFFSET|end]
// replays and follows its output and exits with its code (Ctrl-C stops
// following, not the command), exec ls [--json] lists the running and
// recent commands of every runtime, exec kill ID [--signal SIG], exec wait
// ID (exits with the command's code once the pull after it is done; a lost
// exec is exit 1, EEXEC_LOST). "exec ls" is the verb; "exec -- ls" runs ls.
// serve --max-execs (WSYNC_MAX_EXECS) bounds the commands per workspace.
//
// # Progress
//
// push, pull, tick, verify and exec show the progress of their syncs on
// stderr (progress.go): the client asks the server for its NDJSON progress
// frames when the call's context carries an observer
// (workspace.WithProgress), and a meter draws each run (a push, a pull, a
// snapshot bootstrap) once it has lasted half a second: a
// github.com/schollz/progressbar bar on a terminal (a spinner with the
// counts when the total is unknown), plain lines every two seconds
// elsewhere, nothing with --quiet (WSYNC_QUIET=1). stdout stays the
// verb's own: a summary, --json, or the command's output.
//
// # serve and its seams
//
// serve.go builds the workspace.Manager and the api.Server and shuts both
// down on SIGTERM or SIGINT. It reaches the sync driver and the embedded
// computerd through the seams of hooks.go (newRemote, startEmbedded), which
// the CLI tests replace with a fake remote and a computerd that is not
// there.
//
// # Trash and deletion safety
//
// trash.go is `trash ls|restore|purge` over the workspace's trash (what a
// pull or the files API deleted or overwrote, kept for serve's
// --trash-retention within --trash-max-bytes and --trash-max-entries);
// `trash ls` prints each version's time to the nanosecond, which `trash
// restore --at` takes as printed (or a duration ago). serve_trash.go holds
// serve's trash and deletion-safety flags (--mass-delete-share,
// --mass-delete-min, with their WSYNC_* twins); `pull --allow-mass-delete`
// confirms a pull they paused, and `status` shows it PAUSED.
//
// # Tests
//
// The tests run the verbs in-process against an httptest server over a
// Manager whose remotes are fakes (package workspace/workspacetest); the
// tests that start real binaries and a real mount are in tests/.
package main
