// Package tests holds the end-to-end tests: they build the real
// workspace-server and computerd binaries, run them as processes with a real
// FUSE mount, and drive them through the CLI a user types. Benchmarks and
// their scripts live in tests/bench.
package tests
