package main

import "github.com/wsync/wsync/workspace/remote"

// Seams of serve that the CLI tests replace: serve drives computerd through
// the real sync driver (newRemote) and, without --computerd, runs one in
// this process (startEmbedded, embedded.go).
var (
	// newRemote builds the workspaces' RemoteFactory.
	newRemote = remote.Factory
	// startEmbedded runs a computerd in this process, its FUSE mount at
	// mountDir and its state under dataDir. It returns the sync endpoint
	// and token the default workspace uses, and stop, which serve calls
	// after the server and its remotes have shut down.
	startEmbedded = embeddedComputerd
	// onListen, when set (tests), is told serve's bound address.
	onListen func(addr string)
)
