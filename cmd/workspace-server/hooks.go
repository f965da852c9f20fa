package main

import (
	"context"
	"log/slog"

	"github.com/wsync/wsync/workspace"
)

// The parts of serve that link the sync wire and the FUSE mount are plugged
// in by a file of their own (an init func setting these), so this command
// builds and its client verbs work without them. When they are nil, serve
// still serves the files API and says clearly why sync and exec fail.

// newRemote builds the RemoteFactory of the sync driver (for example
// workspace/remote.Factory). Nil: every push, pull, tick, verify and exec
// fails with ENOTCONN "this server has no sync driver".
var newRemote func(log *slog.Logger) workspace.RemoteFactory

// startEmbedded runs a computerd in this process, its FUSE mount at
// mountDir and its state under dataDir, for serve without --computerd. It
// returns the sync endpoint and token the default workspace uses, and stop,
// which serve calls after the server and its remotes have shut down.
var startEmbedded func(ctx context.Context, mountDir, dataDir string) (endpoint, token string, stop func() error, err error)

// onListen, when set (tests), is told serve's bound address.
var onListen func(addr string)
