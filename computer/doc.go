// Package computer is computerd, the container side of a wsync pair, as a
// library: a vfs store (on disk or in memory), its FUSE mount, the sync
// server that the workspace server drives, the command runner, and the
// HTTP routes around them (/health, /info, /stats, /watermarks, /metrics,
// /sync). cmd/computerd is a thin main over it, and workspace-server embeds
// it when no remote computerd is configured.
//
// # Lifecycle
//
// Start opens the store, cleans a stale mount a crashed predecessor left
// (ENOTCONN), mounts, and serves. Shutdown stops the sync server (in-flight
// applies are single transactions: they commit or roll back whole), kills
// running commands, flushes open files, unmounts (detaching a busy mount
// as a last resort) and closes the store. With on-disk state a restart
// keeps files and watermarks, so the next sync is incremental; with
// :memory: state the workspace server's invariant check notices the reset
// and re-baselines.
//
// # Security
//
// Every route but /health needs the bearer token (constant-time compare).
// Start refuses a non-loopback listen address without a token. Tokens are
// never logged.
package computer
